"""Attacks on the OTLP trace receiver (``exec --collect-traces``, the daemon's ``collect_traces``),
issue 26 item 2: a gzip bomb, stacked encodings, JSON nested 100k deep, a post from a process
that does not hold the run's secret, and who can read the trace files.

Memory is measured with ``tracemalloc`` in this process (the receiver runs here, its inflating in
a worker thread, which ``tracemalloc`` sees too)."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import stat
import time
import tracemalloc
import zlib
from pathlib import Path

import pytest
from otlp_client import PROTOBUF, post

from coven_codex.traces.receiver import MAX_BODY_BYTES, OtlpReceiver
from coven_codex.traces.routing import ThreadRouter
from coven_codex.traces.writer import JsonlWriter

MIB = 2**20
VALID = b'{"resourceLogs": []}'


@pytest.fixture(scope="module")
def gzip_bomb() -> bytes:
    """About 0.5 MB of gzip that inflates to 512 MiB of zeros (32 members of 16 MiB each)."""
    deflater = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    member = deflater.compress(bytes(16 * MIB)) + deflater.flush()
    return member * 32


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def test_a_gzip_bomb_is_refused_within_bounded_memory_without_blocking_the_server(
    tmp_path: Path, gzip_bomb: bytes
) -> None:
    assert len(gzip_bomb) < 600_000
    out = tmp_path / "traces.jsonl"
    async with OtlpReceiver(JsonlWriter(out)) as receiver:
        longest_gap = 0.0
        stop = asyncio.Event()

        async def tick() -> None:
            nonlocal longest_gap
            last = time.monotonic()
            while not stop.is_set():
                await asyncio.sleep(0.01)
                now = time.monotonic()
                longest_gap, last = max(longest_gap, now - last), now

        ticker = asyncio.create_task(tick())
        tracemalloc.start()
        try:
            status, reason = await post(receiver, "/v1/logs", gzip_bomb, PROTOBUF, extra="content-encoding: gzip\r\n")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
            stop.set()
            await ticker
        assert status == 413 and b"decompressed" in reason
        # inflation stopped at the limit: the limit, one step and the body, never the 512 MiB
        assert peak < MAX_BODY_BYTES + 16 * MIB, f"peak {peak / MIB:.0f} MiB"
        assert longest_gap < 1.0, f"the event loop was blocked for {longest_gap:.2f}s"
        ok, _ = await post(receiver, "/v1/logs", VALID, "application/json")
        assert ok == 200
    assert len(lines(out)) == 1


async def test_stacked_content_encodings_are_refused_before_inflating(tmp_path: Path, gzip_bomb: bytes) -> None:
    out = tmp_path / "traces.jsonl"
    double = gzip.compress(gzip_bomb)
    async with OtlpReceiver(JsonlWriter(out)) as receiver:
        tracemalloc.start()
        try:
            status, reason = await post(
                receiver, "/v1/logs", double, "application/json", extra="content-encoding: gzip, gzip\r\n"
            )
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert status == 415 and b"stacked" in reason
        assert peak < 8 * MIB, f"peak {peak / MIB:.0f} MiB"
        # the same refusal when the two codings come in two header lines
        two_lines = "content-encoding: gzip\r\ncontent-encoding: deflate\r\n"
        assert (await post(receiver, "/v1/logs", double, "application/json", extra=two_lines))[0] == 415
        assert (await post(receiver, "/v1/logs", VALID, "application/json"))[0] == 200
    assert len(lines(out)) == 1


async def test_json_nested_100k_deep_gets_a_clear_400_and_the_receiver_keeps_serving(tmp_path: Path) -> None:
    out = tmp_path / "traces.jsonl"
    deep = b'{"resourceLogs": [], "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    async with OtlpReceiver(JsonlWriter(out)) as receiver:
        status, reason = await post(receiver, "/v1/logs", deep, "application/json")
        assert status == 400 and b"nested 100001 deep" in reason, reason
        compressed = gzip.compress(deep)
        status, _ = await post(
            receiver, "/v1/traces", compressed, "application/json", extra="content-encoding: gzip\r\n"
        )
        assert status == 400
        assert (await post(receiver, "/v1/logs", VALID, "application/json"))[0] == 200
        assert receiver.refused == {400: 2}
    assert len(lines(out)) == 1


async def test_a_post_without_the_runs_secret_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    out = tmp_path / "traces.jsonl"
    forged = json.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": [{"body": {"stringValue": "forged"}}]}]}]})
    async with OtlpReceiver(JsonlWriter(out)) as receiver, OtlpReceiver(JsonlWriter(tmp_path / "other.jsonl")) as other:
        missing = await post(receiver, "/v1/logs", forged.encode(), "application/json", with_secret=False)
        assert missing[0] == 401 and b"x-coven-otlp-secret" in missing[1]
        # another receiver's secret (an earlier run's, another daemon's) is no better
        header = next(iter(other.target.headers.items()))
        wrong = await post(
            receiver,
            "/v1/logs",
            forged.encode(),
            "application/json",
            with_secret=False,
            extra=f"{header[0]}: {header[1]}\r\n",
        )
        assert wrong[0] == 401
        assert receiver.refused == {401: 2}
        assert (await post(receiver, "/v1/logs", VALID, "application/json"))[0] == 200
    assert "forged" not in out.read_text()
    assert len(lines(out)) == 1


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_trace_files_are_readable_by_their_owner_only(tmp_path: Path) -> None:
    old_umask = os.umask(0o022)
    try:
        existing = tmp_path / "exec" / "traces.jsonl"
        existing.parent.mkdir()
        existing.write_bytes(b"")
        existing.chmod(0o644)  # left by an earlier run
        writer = JsonlWriter(existing, max_bytes=50, backups=2)  # one line per file
        async with OtlpReceiver(writer) as receiver:
            for _ in range(3):
                assert (await post(receiver, "/v1/logs", VALID, "application/json"))[0] == 200
        rotated = sorted(existing.parent.iterdir())
        assert [path.name for path in rotated] == ["traces.jsonl", "traces.jsonl.1", "traces.jsonl.2"]
        assert {mode(path) for path in rotated} == {0o600}

        daemon_dir = tmp_path / "state" / "traces"
        attribute = {"key": "conversation.id", "value": {"stringValue": "thread-1"}}
        tagged = {"resourceLogs": [{"scopeLogs": [{"logRecords": [{"attributes": [attribute]}]}]}]}
        async with OtlpReceiver(ThreadRouter(daemon_dir)) as receiver:
            assert (await post(receiver, "/v1/logs", json.dumps(tagged).encode(), "application/json"))[0] == 200
            assert (await post(receiver, "/v1/traces", b'{"resourceSpans": []}', "application/json"))[0] == 200
        assert mode(daemon_dir) == 0o700
        assert sorted((path.name, mode(path)) for path in daemon_dir.iterdir()) == [
            ("codex.jsonl", 0o600),
            ("thread-1.jsonl", 0o600),
        ]
    finally:
        os.umask(old_umask)
