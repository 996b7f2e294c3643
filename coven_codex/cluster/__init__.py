"""Several daemons on one Redis journal: leases with fencing tokens, the state and rollout mirror,
hand-over (docs/distributed.md). Needs the ``redis`` extra (the lease-lost error the sessions catch is
:mod:`coven_codex.agent.lease_lost`, which does not).

Its face, what the daemon uses: :mod:`~coven_codex.cluster.setup` (joining), :mod:`~coven_codex.cluster.keys`,
:mod:`~coven_codex.cluster.registry`, :mod:`~coven_codex.cluster.ownership` (``Ownership``, and the
``SessionHost`` Protocol through which the cluster sees the daemon) and :mod:`~coven_codex.cluster.turns`.
Leases, fencing, the mirror, the node and its scripts are the cluster's own (an import-linter contract).
"""
