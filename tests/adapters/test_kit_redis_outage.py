"""A chat adapter on a Redis journal rides out a Redis restart: waits, says so once, posts everything once."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from test_kit_first_cursor import ListPlatform

from coven_codex.adapters.kit.access import AccessPolicy
from coven_codex.adapters.kit.ledger import DeliveryLedger
from coven_codex.adapters.kit.mapping import NamedMap
from coven_codex.adapters.kit.runner import AdapterRunner
from coven_codex.entries import ResponseEntry
from coven_codex.journal.redis import RedisJournal
from coven_codex.testing.redis_server import RedisServer


async def _posted(platform: ListPlatform, text: str) -> None:
    async with asyncio.timeout(60):
        while not any(text in post for post in platform.posts):
            await asyncio.sleep(0.02)


async def test_an_adapter_rides_out_a_redis_restart(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="coven_codex.journal.redis")
    with RedisServer(tmp_path / "redis", extra_args=("--appendfsync", "always")) as server:
        journal = RedisJournal.from_url(server.url(key="chat"), block_seconds=0.5)
        writer = RedisJournal.from_url(server.url(key="chat"))
        platform = ListPlatform()
        runner = AdapterRunner(
            journal, platform, NamedMap({"c1"}), AccessPolicy.everyone(), DeliveryLedger.memory(), name="redis"
        )
        task = asyncio.create_task(runner.run())
        try:
            async with asyncio.timeout(30):
                await runner.ready.wait()
            await writer.append(ResponseEntry(text="before the restart", conversation="c1"))
            await _posted(platform, "before the restart")
            server.kill()
            await asyncio.sleep(1.5)  # the adapter's tail retries meanwhile: one report, not one per retry
            server.start()
            await writer.append(ResponseEntry(text="after the restart", conversation="c1"))
            await _posted(platform, "after the restart")
        finally:
            platform.done.set()
            await asyncio.wait_for(task, 30)
            await writer.aclose()
            await journal.aclose()
    assert sum("before the restart" in post for post in platform.posts) == 1
    assert sum("after the restart" in post for post in platform.posts) == 1
    assert journal.reachability.outages == 1
    reports = [r.getMessage() for r in caplog.records if "cannot be reached" in r.getMessage()]
    assert len(reports) <= 2  # the adapter's journal once, the writer's at most once
