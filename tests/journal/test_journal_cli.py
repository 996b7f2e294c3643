"""``coven-codex journal``: append, read, tail, cursors and compact, run as real processes; ``open_journal``."""

from __future__ import annotations

import json
import select
import subprocess
import sys
from pathlib import Path

import pytest

from coven_codex.journal import FileJournal, JournalError, JournalRecord
from coven_codex.journal.opening import JournalOptions, open_journal
from coven_codex.journal.redis import RedisJournal
from coven_codex.journal.segments import SegmentLayout


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``coven-codex journal ARGS`` and return what it did."""
    return subprocess.run(
        [sys.executable, "-m", "coven_codex", "journal", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def read_line(process: subprocess.Popen[str], timeout: float = 60) -> str:
    """The next line ``process`` prints (fails after ``timeout`` seconds without one)."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, "no output from journal tail"
    return process.stdout.readline()


def test_append_prints_the_id_and_position_and_read_shows_the_entries(tmp_path: Path) -> None:
    journal = str(tmp_path / "chat.jsonl")
    first = cli("append", "--journal", journal, "--json", '{"kind": "thought", "text": "hello", "conversation": "a"}')
    assert first.returncode == 0, first.stderr
    entry_id, position = first.stdout.split()
    assert position == "0" and len(entry_id) == 32
    lines = '{"kind": "thought", "id": "t2", "text": "two"}\n{"kind": "response", "sender": "codex", "text": "r"}\n'
    more = cli("append", "--journal", journal, "--json", "-", stdin=lines)
    assert more.returncode == 0, more.stderr
    ids = [line.split()[0] for line in more.stdout.splitlines()]
    assert ids[0] == "t2" and len(ids) == 2
    shown = cli("read", "--journal", journal)
    assert shown.returncode == 0
    assert [line.split("  ", 2)[2] for line in shown.stdout.splitlines()] == [
        "user/thought: hello",
        "user/thought: two",
        "codex/response: r",
    ]
    as_json = cli("read", "--journal", journal, "--json", "--conversation", "a")
    rows = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [row["entry"]["text"] for row in rows] == ["hello"]
    assert rows[0]["start"] == "0" and rows[0]["entry"]["id"] == entry_id
    after_first = cli("read", "--journal", journal, "--json", "--from", rows[0]["end"])
    assert [json.loads(line)["entry"]["id"] for line in after_first.stdout.splitlines()] == ids


def test_tail_follows_what_another_process_appends(tmp_path: Path) -> None:
    journal = str(tmp_path / "chat.jsonl")
    assert cli("append", "--journal", journal, "--json", '{"kind": "thought", "text": "before"}').returncode == 0
    tail = subprocess.Popen(
        [sys.executable, "-m", "coven_codex", "journal", "tail", "--journal", journal, "--from-start", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert json.loads(read_line(tail))["entry"]["text"] == "before"
        assert cli("append", "--journal", journal, "--json", '{"kind": "thought", "text": "after"}').returncode == 0
        assert json.loads(read_line(tail))["entry"]["text"] == "after"
    finally:
        tail.terminate()
        tail.wait(timeout=30)


def test_usage_and_journal_errors_say_what_to_do(tmp_path: Path) -> None:
    journal = str(tmp_path / "chat.jsonl")
    bad = cli("append", "--journal", journal, "--json", '{"text": "no kind"}')
    assert bad.returncode == 2 and "is not a journal entry" in bad.stderr and "kind" in bad.stderr
    nothing = cli("read")
    assert nothing.returncode == 2 and "pass --journal" in nothing.stderr
    assert cli("append", "--journal", journal, "--json", '{"kind": "thought"}').returncode == 0
    nowhere = cli("read", "--journal", journal, "--from", "9-0")
    assert nowhere.returncode == 1 and "does not have" in nowhere.stderr
    garbled = cli("read", "--journal", journal, "--from", "abc")
    assert garbled.returncode == 2 and "invalid journal position" in garbled.stderr
    unknown = cli("read", "--journal", "nosuch://host/0")
    assert unknown.returncode == 1 and "no journal backend for nosuch://" in unknown.stderr


async def test_cursors_and_compact_on_a_segmented_journal(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    config = tmp_path / "coven.toml"
    config.write_text(f'journal = "{path}"\njournal_segment_bytes = 1024\ndurability = "never"\n')
    lines = "".join(json.dumps({"kind": "thought", "text": f"e{i}"}) + "\n" for i in range(30))
    appended = cli("append", "--config", str(config), "--json", "-", stdin=lines)  # rolls over as configured
    assert appended.returncode == 0, appended.stderr
    journal = FileJournal(path)
    records = [item for item in await journal.read() if isinstance(item, JournalRecord)]
    assert len(records) == 30 and records[-1].start.major >= 3
    await journal.save_cursor("web #1", records[20].end)
    await journal.save_cursor("daemon", records[25].end)
    listed = cli("cursors", "--config", str(config))
    assert listed.stdout.splitlines() == [f"{records[25].end}\tdaemon", f"{records[20].end}\tweb #1"]
    shown = cli("cursors", "show", "web #1", "--config", str(config), "--json")
    assert json.loads(shown.stdout) == {"name": "web #1", "position": str(records[20].end)}
    dry = cli("compact", "--config", str(config), "--dry-run")
    assert dry.returncode == 0 and "would archive" in dry.stdout and "'web #1'" in dry.stdout
    assert SegmentLayout(path).sealed_numbers()[0] == 0
    done = cli("compact", "--config", str(config), "--delete")
    assert done.returncode == 0 and "deleted" in done.stdout, done.stderr
    assert SegmentLayout(path).sealed_numbers()[0] == records[20].end.major
    early = records[2].end
    gone = cli("read", "--journal", str(path), "--from", str(early))
    assert gone.returncode == 1 and "compaction deleted" in gone.stderr and "resume from" in gone.stderr
    assert cli("read", "--journal", str(path), "--from-start").stdout.count("user/thought") == sum(
        1 for r in records if r.start.major >= records[20].end.major
    )
    await journal.aclose()


async def test_open_journal_opens_files_file_urls_and_redis_urls(tmp_path: Path) -> None:
    opened = open_journal(str(tmp_path / "a.jsonl"), JournalOptions(segment_bytes=2048, durability="never"))
    assert isinstance(opened, FileJournal) and opened.segment_bytes == 2048 and opened.durability == "never"
    await opened.aclose()
    assert isinstance(open_journal(f"file://{tmp_path / 'b.jsonl'}"), FileJournal)
    with pytest.raises(JournalError, match="no journal backend for mem://"):
        open_journal("mem://x")
    redis = open_journal("redis://127.0.0.1:1/0?key=chat")  # opening does not connect
    assert isinstance(redis, RedisJournal)
    await redis.aclose()
