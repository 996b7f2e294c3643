"""The offline demo, non-interactively, with the real Codex CLI: a reply that used a spell."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from coven_codex.entries import ResponseEntry, ToolCallEntry, ToolResultEntry, parse_entry_json

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.codex
def test_demo_script_mode_calls_a_spell(tmp_path: Path, codex_bin: Path) -> None:
    folder = tmp_path / "demo"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "coven_codex",
            "demo",
            "--dir",
            str(folder),
            "--codex-path",
            str(codex_bin),
            "--turn-timeout",
            "60",
            "--script",
            "hello",
            "What is 19 plus 23?",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    transcript = done.stdout
    assert "you> What is 19 plus 23?" in transcript
    assert "→ coven.add(a=19, b=23)" in transcript  # the kit's compact tool-call form
    assert "codex: The `add` spell ran in the daemon's Python process and returned 42." in transcript

    entries = [parse_entry_json(line) for line in (folder / "journal.jsonl").read_text().splitlines()]
    calls = [e for e in entries if isinstance(e, ToolCallEntry)]
    results = [e for e in entries if isinstance(e, ToolResultEntry)]
    replies = [e.text for e in entries if isinstance(e, ResponseEntry)]
    assert [(c.tool, c.arguments) for c in calls] == [("coven.add", {"a": 19, "b": 23})]
    assert [(r.call_id, r.text, r.is_error) for r in results] == [(calls[0].call_id, "42", False)]
    assert len(replies) == 2 and replies[1].endswith("returned 42.")
    assert "Hello from the offline demo" in replies[0]
    assert transcript.count("[turn completed]") == 2  # each turn's end reaches the chat
    # the demo's model provider has its env_key set: that is credentials, not a reason to warn
    assert "no Codex credentials" not in (folder / "daemon.log").read_text()
