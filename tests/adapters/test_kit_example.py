"""The adapter kit's example: shown verbatim in docs/adapters.md, short, and it works."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from coven_codex.entries import ApprovalRequestEntry, ResponseEntry, ThoughtEntry, parse_entry_json

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "kit_adapter.py"


def test_the_docs_show_the_example_verbatim_and_it_is_short() -> None:
    assert "```python\n" + EXAMPLE.read_text() + "```" in (ROOT / "docs" / "adapters.md").read_text()
    code = [line for line in EXAMPLE.read_text().split('"""', 2)[2].splitlines() if line.strip()]
    assert len(code) < 60


def test_the_example_adapter_round_trip(tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    adapter = subprocess.Popen(
        [sys.executable, str(EXAMPLE), str(journal), "ann"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert adapter.stdin is not None and adapter.stdout is not None
    try:
        adapter.stdin.write(json.dumps({"channel": "c1", "user": "eve", "text": "let me in"}) + "\n")
        adapter.stdin.write(json.dumps({"channel": "c1", "user": "ann", "text": "hello codex"}) + "\n")
        adapter.stdin.flush()
        refusal = json.loads(adapter.stdout.readline())
        assert refusal["op"] == "post" and "not allowed" in refusal["text"]
        deadline = time.monotonic() + 15
        while not journal.exists() or not journal.read_text():
            assert time.monotonic() < deadline, "no thought appended"
            time.sleep(0.05)
        thoughts = [parse_entry_json(line) for line in journal.read_text().splitlines()]
        assert [(type(t), t.text, t.conversation) for t in thoughts] == [(ThoughtEntry, "hello codex", "jsonl:/c1/")]
        with journal.open("a") as handle:
            handle.write(ResponseEntry(text="hi **ann**", conversation="jsonl:/c1/").to_json() + "\n")
            handle.write(
                ApprovalRequestEntry(request_id="r1", action="run ls", conversation="jsonl:/c1/").to_json() + "\n"
            )
        reply, request = json.loads(adapter.stdout.readline()), json.loads(adapter.stdout.readline())
        assert reply["text"] == "codex: hi **ann**" and reply["channel"] == "c1"
        assert request["buttons"] == ["approve r1", "approve-session r1", "deny r1"]
    finally:
        adapter.stdin.close()
        adapter.wait(15)
    assert adapter.returncode == 0, adapter.stderr.read() if adapter.stderr else ""


def test_an_adapter_allowing_nobody_says_so_at_start_up(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), str(tmp_path / "journal.jsonl")],
        input="",
        text=True,
        capture_output=True,
        timeout=30,
        cwd=ROOT,
        check=True,
    )
    assert "nobody is allowed yet" in done.stderr
