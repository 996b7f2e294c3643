"""Several daemons on one Redis journal: leases with fencing tokens, the state and rollout mirror,
hand-over (docs/distributed.md). Needs the ``redis`` extra, except :mod:`.errors`."""
