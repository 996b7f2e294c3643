"""Several daemons on one Redis journal: leases with fencing tokens, the state and rollout mirror,
hand-over (docs/distributed.md). Needs the ``redis`` extra (the lease-lost error the sessions catch is
:mod:`coven_codex.agent.lease_lost`, which does not)."""
