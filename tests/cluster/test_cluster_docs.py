"""docs/distributed.md's table of Redis keys is the one ClusterKeys makes."""

from __future__ import annotations

import re
from pathlib import Path

from coven_codex.cluster.keys import ClusterKeys

DOC = Path(__file__).resolve().parent.parent.parent / "docs" / "distributed.md"


def test_the_key_table_lists_every_key_the_cluster_uses() -> None:
    doc = DOC.read_text()
    table = doc[doc.index("## Ownership") : doc.index("- **Claim**")]
    documented = set(re.findall(r"`([a-z-]+)(?::<[a-z ]+>)*`", table))
    keys = ClusterKeys("NS")
    base = "coven:NS:"
    made = {keys.daemons, keys.expiry, keys.handover}
    made |= {make("C") for make in (keys.lease, keys.holder, keys.counter, keys.state, keys.floor, keys.rollout)}
    made |= {keys.rollout_data("C"), keys.report("C", 1), keys.reported("C", "vm-1")}
    names = {key.removeprefix(base).split(":")[0] for key in made}
    assert names <= documented, names - documented
