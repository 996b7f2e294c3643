"""The journal lag of reader ``egress``: rollout lines Codex wrote that egress has not translated yet."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

from coven_codex.metrics.checks import MAX_LAG_READ, report_egress_lag, rollout_lag
from coven_codex.metrics.instruments import Instruments

ROLLOUT = Path(__file__).resolve().parent.parent / "fixtures" / "rollouts" / "0.171.0" / "newer_items.jsonl"


def line_starts(data: bytes) -> list[int]:
    starts = [0]
    starts += [index + 1 for index, byte in enumerate(data) if byte == ord("\n")]
    return starts[:-1]


def stamp(line: bytes) -> datetime:
    return datetime.fromisoformat(json.loads(line)["timestamp"])


def test_the_lines_after_egress_offset_and_the_age_of_the_oldest_are_counted(tmp_path: Path) -> None:
    data = ROLLOUT.read_bytes()
    lines = data.splitlines(keepends=True)
    starts = line_starts(data)
    rollout = tmp_path / "rollout.jsonl"
    rollout.write_bytes(data + b'{"timestamp":"2026-11-27T17:59:00.000Z","type":"half a li')  # Codex mid-write
    now = stamp(lines[-1]) + timedelta(seconds=30)
    behind = 10
    count, age = rollout_lag([(rollout, starts[-behind])], now)
    assert count == behind  # the half-written line is not one yet
    assert age == (now - stamp(lines[-behind])).total_seconds()
    assert rollout_lag([(rollout, len(data))], now) == (0, 0.0)  # caught up
    # over several conversations: the lines add up, the oldest counts
    other = tmp_path / "other.jsonl"
    other.write_bytes(data)
    count, age = rollout_lag([(rollout, starts[-2]), (other, starts[-behind]), (tmp_path / "gone.jsonl", 0)], now)
    assert count == 2 + behind
    assert age == (now - stamp(lines[-behind])).total_seconds()


def test_a_huge_backlog_is_read_only_up_to_the_bound(tmp_path: Path) -> None:
    line = b'{"timestamp":"2026-11-27T17:51:23.227Z","type":"event_msg","payload":{"text":"' + b"x" * 1000 + b'"}}\n'
    rollout = tmp_path / "rollout.jsonl"
    rollout.write_bytes(line * (2 * MAX_LAG_READ // len(line)))
    count, _age = rollout_lag([(rollout, 0)])
    assert count == MAX_LAG_READ // len(line)


async def test_the_egress_lag_is_reported_under_reader_egress(tmp_path: Path) -> None:
    data = ROLLOUT.read_bytes()
    rollout = tmp_path / "rollout.jsonl"
    rollout.write_bytes(data)
    metrics = Instruments()
    await report_egress_lag(metrics, [(rollout, line_starts(data)[-3])])
    assert metrics.registry.get_sample_value("coven_journal_lag_entries", {"reader": "egress"}) == 3
    lag = metrics.registry.get_sample_value("coven_journal_lag_seconds", {"reader": "egress"})
    assert lag is not None and lag > 0
