"""The examples shipped for users: the minimal adapter runs, and the docs show it as it is."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from coven_codex.entries import ApprovalEntry, CancelEntry, ResponseEntry, ThoughtEntry, parse_entry_json

ROOT = Path(__file__).resolve().parent.parent
ADAPTER = ROOT / "examples" / "minimal_adapter.py"


def test_the_docs_show_the_adapter_file_verbatim() -> None:
    doc = (ROOT / "docs" / "journal-protocol.md").read_text()
    assert "```python\n" + ADAPTER.read_text() + "```" in doc


def _entries(journal: Path) -> list[object]:
    if not journal.exists():
        return []
    return [parse_entry_json(line) for line in journal.read_text().splitlines()]


def test_minimal_adapter_round_trip(tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    adapter = subprocess.Popen(
        [sys.executable, str(ADAPTER), str(journal)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert adapter.stdin is not None and adapter.stdout is not None
    try:
        adapter.stdin.write("hello codex\n/stop\n/approve req-7\n")
        adapter.stdin.flush()
        deadline = time.monotonic() + 15
        while len(_entries(journal)) < 3:
            assert time.monotonic() < deadline, "the adapter did not append its entries"
            time.sleep(0.05)
        with journal.open("a") as handle:
            handle.write(ResponseEntry(id="r1", text="hi, I am Codex", conversation="console").to_json() + "\n")
        assert adapter.stdout.readline().strip() == "codex [response]> hi, I am Codex"
        adapter.stdin.write("\n")  # an empty line ends the adapter
        adapter.stdin.flush()
        assert adapter.wait(timeout=15) == 0
    finally:
        if adapter.poll() is None:
            adapter.kill()
            adapter.wait()
        adapter.stdout.close()
        adapter.stdin.close()
        if adapter.stderr is not None:
            adapter.stderr.close()
    thought, cancel, approval = _entries(journal)[:3]
    assert isinstance(thought, ThoughtEntry) and (thought.text, thought.conversation) == ("hello codex", "console")
    assert isinstance(cancel, CancelEntry)
    assert isinstance(approval, ApprovalEntry) and (approval.request_id, approval.decision) == ("req-7", "approve")
