"""The conversation core's services: a journal's thoughts in, Codex's replies out, exactly once.

Its face, what the packages above it (the daemon, the cluster, jobs) use:

- :mod:`~coven_codex.agent.services` (``SessionServices``, what the sessions share),
  (the sessions themselves, ``SessionManager``, are :mod:`coven_codex.conversation`'s) and
  :mod:`~coven_codex.agent.ingress` (the one journal reader);
- :mod:`~coven_codex.agent.state` (the state log), :mod:`~coven_codex.agent.scope` (where it lives),
  :mod:`~coven_codex.agent.recovery` (did Codex receive a thought?), :mod:`~coven_codex.agent.storage`,
  :mod:`~coven_codex.agent.processes`, :mod:`~coven_codex.agent.slots`, :mod:`~coven_codex.agent.writer`,
  :mod:`~coven_codex.agent.egress` (``complete_length``);
- the names others share with it: :mod:`~coven_codex.agent.job_names`, :mod:`~coven_codex.agent.lease_lost`,
  :mod:`~coven_codex.agent.thread_options` (``MAX_MODEL_CHARS``).

The parts a session uses (``cursor``, ``saver``, ``egress_runner``, ``replay``) are the core's own
(this package's and :mod:`coven_codex.conversation`'s): an import-linter contract keeps them so. The
face is the modules, not re-exports here: importing this package loads nothing (``jobs`` and
``mcp-serve`` import ``job_names`` at start-up).
"""
