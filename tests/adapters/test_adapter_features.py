"""docs/adapters.md's feature table is the adapters' declared features (kit/features.py), row for row."""

from __future__ import annotations

from pathlib import Path

from coven_codex.adapters.kit.commands import COMMANDS
from coven_codex.adapters.kit.features import ADAPTERS, FEATURES, feature_table
from coven_codex.adapters.slack.platform import REACTION, STATUS

DOC = (Path(__file__).resolve().parents[2] / "docs" / "adapters.md").read_text(encoding="utf-8")


def test_the_docs_show_the_declared_features_of_every_adapter() -> None:
    section = DOC[DOC.index("## What each adapter supports") :]
    assert feature_table() in section
    assert all(len(cells) == len(ADAPTERS) for cells in FEATURES.values())


def test_the_table_names_what_the_code_does() -> None:
    assert STATUS.strip("…") in FEATURES["signs of life"][2] and REACTION.startswith("hourglass")
    commands = {part.strip("`/").split()[0] for part in FEATURES["approvals"][0].split(", ")}
    assert commands <= set(COMMANDS) and "details" in COMMANDS
