"""Helpers for rollout tests: the committed fixtures recorded from the real Codex CLIs."""

from __future__ import annotations

from pathlib import Path

from coven_codex.entries import BaseEntry
from coven_codex.rollout import RolloutTranslator
from coven_codex.tailing import Line

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "rollouts"
VERSIONS = ("0.169.0", "0.47.0")


def fixture_path(version: str, scenario: str) -> Path:
    return FIXTURES / version / f"{scenario}.jsonl"


def fixture_files() -> list[Path]:
    return sorted(p for p in FIXTURES.glob("*/*.jsonl") if not p.name.endswith((".exec.jsonl", ".expected.jsonl")))


def expected_files() -> list[Path]:
    """The hand-written ``<scenario>.expected.jsonl`` files: the entries a fixture must give."""
    return sorted(FIXTURES.glob("*/*.expected.jsonl"))


def lines_of(data: bytes) -> list[Line]:
    """Complete lines with their offsets, as the tailer yields them."""
    lines: list[Line] = []
    start = 0
    while (newline := data.find(b"\n", start)) != -1:
        lines.append(Line(data[start:newline], start, newline + 1))
        start = newline + 1
    return lines


def translate(data: bytes, *, thread_id: str = "T", decode_all: bool = False) -> list[BaseEntry]:
    translator = RolloutTranslator("conv", thread_id, decode_all=decode_all)
    return [entry for line in lines_of(data) for entry in translator.feed(line)]


def summary(entries: list[BaseEntry]) -> list[tuple[str, ...]]:
    """A compact view: (kind, main field, text) per entry."""
    out: list[tuple[str, ...]] = []
    for entry in entries:
        data = entry.model_dump()
        detail = {"status": "state", "error": "code", "tool_call": "tool", "tool_result": "tool"}.get(entry.kind)
        out.append((entry.kind, str(data.get(detail, "")) if detail else "", entry.text))
    return out
