"""The daemon's composition root: what ``coven-codex run`` builds from the settings, and runs.

:func:`~coven_codex.daemon.bootstrap.run_daemon` finds Codex, prepares its home, opens the journal
and the state, joins a cluster if asked, and runs a :class:`~coven_codex.daemon.daemon.Daemon`:
start-up recovery, the conversations (:mod:`coven_codex.agent`), the ingress, clean shutdown. The
cluster sees the running daemon only through its ``SessionHost`` Protocol
(:mod:`~coven_codex.daemon.cluster_host`).

Its face is :mod:`~coven_codex.daemon.bootstrap` (``run_daemon``, ``BootstrapError``, ``Hooks``), which
the commands that run a daemon (``run``, ``demo``) import; importing this package loads nothing.
"""
