"""examples/grafana-dashboard.json is built on the metrics the processes export, and shows each of them."""

from __future__ import annotations

import json
import re
from pathlib import Path

from coven_codex.metrics.instruments import Instruments

ROOT = Path(__file__).resolve().parent.parent.parent


def test_every_query_names_exported_metrics_and_every_metric_is_shown() -> None:
    dashboard = json.loads((ROOT / "examples" / "grafana-dashboard.json").read_text())
    used: set[str] = set()
    for panel in dashboard["panels"]:
        assert panel["datasource"]["type"] == "prometheus"
        for target in panel["targets"]:
            used |= set(re.findall(r"\b(coven_[a-z_]+)\b", target["expr"]))
    exported = set()
    for family in Instruments().registry.collect():
        if family.type == "counter":
            exported.add(family.name + "_total")
        elif family.type == "histogram":
            exported |= {family.name + suffix for suffix in ("_bucket", "_sum", "_count")}
        else:
            exported.add(family.name)
    assert used <= exported, used - exported
    shown_families = {re.sub(r"_(bucket|sum|count)$", "", name) for name in used}
    every = {re.sub(r"_(bucket|sum|count)$", "", name) for name in exported}
    assert shown_families == every, every - shown_families
