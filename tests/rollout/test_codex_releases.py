"""Rollouts of Codex releases other projects published (0.34 to 0.147): the project's own
fixtures recorded from those CLIs, each with the entries it must give written beside it
(``<scenario>.expected.jsonl``), and the properties every fixture must keep."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rollout_helpers import FIXTURES, expected_files, fixture_files, translate

from coven_codex.entries import BaseEntry


def _fixture_of(expected: Path) -> Path:
    return expected.with_name(expected.name.removesuffix(".expected.jsonl") + ".jsonl")


def _view(entry: BaseEntry, keys: list[str]) -> dict[str, Any]:
    """The fields an expected entry names, with the entry's values (``ts`` as written in JSON)."""
    data = json.loads(entry.to_json())
    return {key: data.get(key) for key in keys}


@pytest.mark.parametrize("expected", expected_files(), ids=lambda p: f"{p.parent.name}/{p.name.split('.')[0]}")
def test_fixture_gives_the_entries_written_beside_it(expected: Path) -> None:
    wanted = [json.loads(line) for line in expected.read_text(encoding="utf-8").splitlines() if line.strip()]
    entries = translate(_fixture_of(expected).read_bytes(), thread_id="T")
    assert [_view(entry, list(want)) for entry, want in zip(entries, wanted, strict=False)] == wanted
    assert len(entries) == len(wanted), [entry.kind for entry in entries[len(wanted) :]]


def test_every_fixture_of_another_release_has_expected_entries() -> None:
    index = json.loads((FIXTURES / "scenarios.json").read_text())
    pinned = {"0.169.0", "0.47.0"}
    recorded = {p for p in fixture_files() if p.parent.name not in pinned}
    assert recorded, "no fixtures of other Codex releases"
    assert {p for p in recorded if not p.with_name(p.stem + ".expected.jsonl").exists()} == set()
    assert {p.parent.name for p in recorded} <= set(index["versions"])


@pytest.mark.parametrize("path", fixture_files(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_entries_never_go_back_in_time(path: Path) -> None:
    """Codex's own stamps may run backwards (0.58); the entries' ``ts`` may not."""
    stamps = [entry.ts for entry in translate(path.read_bytes())]
    assert stamps == sorted(stamps)
