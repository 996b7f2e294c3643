"""The holds of a Redis journal (one daemon, one webhook sender) against a real redis-server."""

from __future__ import annotations

import asyncio
import socket
import time

from coven_codex.journal.redis import RedisJournal
from coven_codex.journal.redis.holds import Holder, RedisHold
from coven_codex.testing.redis_server import RedisServer


async def test_a_daemon_killed_with_sigkill_is_replaced_once_its_hold_runs_out(redis_server: RedisServer) -> None:
    journal = RedisJournal.from_url(redis_server.url(key="adv-hold-kill9"))
    try:
        killed = RedisHold(journal, journal.location.daemon, owner="host-a", ttl=1.0)
        assert await killed.take() is None  # (then never renewed nor released: a kill -9)
        # restarted on its own state directory (the same owner id), it takes its hold back at once
        assert await RedisHold(journal, journal.location.daemon, owner="host-a", ttl=1.0).take() is None
        other = RedisHold(journal, journal.location.daemon, owner="host-b", ttl=1.0)
        found = await other.take()
        assert isinstance(found, Holder) and found.owner == "host-a" and found.pid == killed.holder.pid
        assert found.host == socket.gethostname() and found.since == killed.holder.since
        began = time.monotonic()
        while await other.take() is not None:
            assert time.monotonic() - began < 3.0, "the dead holder's hold did not run out"
            await asyncio.sleep(0.1)
        assert time.monotonic() - began > 0.5
        again = await killed.renew()  # the old holder, waking up, finds it taken over
        assert isinstance(again, Holder) and again.owner == "host-b"
    finally:
        await journal.aclose()
