"""The JSONL writer appends whole lines and rotates by size, keeping a bounded number of old files."""

from __future__ import annotations

from pathlib import Path

from coven_codex.traces.writer import JsonlWriter


def test_rotation_keeps_whole_lines_and_a_bounded_number_of_backups(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    writer = JsonlWriter(path, max_bytes=25, backups=2)
    for index in range(6):
        writer.write_line(b'{"n": %d, "pad": "xx"}\n' % index)  # 21 bytes: one line per file
    writer.close()
    assert path.read_bytes() == b'{"n": 5, "pad": "xx"}\n'
    assert (tmp_path / "t.jsonl.1").read_bytes() == b'{"n": 4, "pad": "xx"}\n'
    assert (tmp_path / "t.jsonl.2").read_bytes() == b'{"n": 3, "pad": "xx"}\n'
    assert not (tmp_path / "t.jsonl.3").exists()


def test_without_a_limit_everything_is_appended_and_reopening_appends(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "t.jsonl"
    writer = JsonlWriter(path)
    writer.write_line(b"{}\n")
    writer.close()
    writer.write_line(b"[]\n")
    writer.close()
    assert path.read_bytes() == b"{}\n[]\n"
    assert writer.lines == 2
