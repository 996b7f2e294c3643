"""validate on a Redis journal: connection, version and persistence, against real redis-servers."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from coven_codex.journal.redis.errors import RedisMisconfigured
from coven_codex.journal.redis.journal import RedisJournal
from coven_codex.settings import Settings
from coven_codex.testing.redis_server import RedisServer, free_port
from coven_codex.validate.framework import ProbeContext, Status, run_plan
from coven_codex.validate.plan import PLAN

REDIS_PROBES = tuple(probe for probe in PLAN if probe.code in ("redis", "redis_persistence"))


async def _run(tmp_path: Path, journal: str | Path) -> dict[str, tuple[Status, str, str]]:
    context = ProbeContext(settings=Settings.model_validate({"workspace": tmp_path, "journal": journal}))
    outcomes = await run_plan(REDIS_PROBES, context)
    return {o.probe.code: (o.result.status, o.result.detail, o.result.fix) for o in outcomes}


async def test_a_redis_with_an_append_only_file_passes(tmp_path: Path, redis_server: RedisServer) -> None:
    found = await _run(tmp_path, redis_server.url(key="chat"))
    status, detail, _ = found["redis"]
    assert status is Status.PASS and "Redis 7." in detail and "'chat'" in detail
    assert found["redis_persistence"][:2] == (Status.PASS, "append-only file on (fsync every second)")


async def test_a_redis_without_persistence_is_warned_about(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "redis", appendonly=False) as server:
        found = await _run(tmp_path, server.url(key="chat"))
    assert found["redis"][0] is Status.PASS
    status, detail, fix = found["redis_persistence"]
    assert status is Status.WARN
    assert "persistence is off" in detail and "appendonly yes" in fix


async def test_an_unreachable_redis_fails_with_what_to_do(tmp_path: Path) -> None:
    found = await _run(tmp_path, f"redis://127.0.0.1:{free_port()}/0?key=chat")
    status, detail, fix = found["redis"]
    assert status is Status.FAIL and "cannot reach Redis at redis://127.0.0.1" in detail
    assert "Start Redis" in fix
    assert found["redis_persistence"][0] is Status.SKIP


async def test_a_file_journal_skips_the_redis_checks(tmp_path: Path) -> None:
    found = await _run(tmp_path, tmp_path / "journal.jsonl")
    assert found["redis"][0] is Status.SKIP and found["redis_persistence"][0] is Status.SKIP


PLAIN_TEXT_BOUND = 2.0
"""A ``rediss://`` name on a plain server is told in one local round trip; a TLS handshake it never
answers was waited for until the connect timeout (3 s for validate, 5 s for the journal)."""


async def test_a_rediss_name_on_a_plain_redis_fails_at_once_saying_so(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    name = redis_server.url(key="chat").replace("redis://", "rediss://", 1)
    began = time.monotonic()
    found = await _run(tmp_path, name)
    assert time.monotonic() - began < PLAIN_TEXT_BOUND
    status, detail, fix = found["redis"]
    assert status is Status.FAIL and "speaks plain Redis, not TLS" in detail and "redis://" in fix
    began = time.monotonic()
    journal = RedisJournal.from_url(name)
    try:
        with pytest.raises(RedisMisconfigured, match="speaks plain Redis, not TLS"):
            await journal.connect()
    finally:
        await journal.aclose()
    assert time.monotonic() - began < PLAIN_TEXT_BOUND
