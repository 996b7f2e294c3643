"""A daemon on a Redis journal that stalls past its hold (``SIGSTOP``, a frozen VM) while another
process takes the journal over: real daemon, real redis-server."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_harness import AgentHarness

from coven_codex.journal.redis import RedisJournal
from coven_codex.journal.redis.holds import RedisHold
from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.redis_server import RedisServer

pytestmark = [pytest.mark.codex, pytest.mark.timeout(300)]

Factory = Callable[[Path, ScriptedModelServer, str], AgentHarness]


async def test_a_daemon_stalled_past_its_hold_and_taken_over_stops_with_one_message(
    *,
    codex_bin_169: Path,
    model_server: ScriptedModelServer,
    harness_factory: Factory,
    redis_server: RedisServer,
) -> None:
    name = redis_server.url(key="adv-stalled-holder")
    h = harness_factory(codex_bin_169, model_server, name)
    daemon = await h.start("--lease-time", "1")
    await h.until_logged("ready (pid")
    journal = RedisJournal.from_url(name)
    try:
        daemon.process.send_signal(signal.SIGSTOP)  # stalled (a VM frozen, SIGSTOP) past its hold's second
        try:
            intruder = RedisHold(journal, journal.location.daemon, owner="another-machine", ttl=30.0)
            began = time.monotonic()
            while await intruder.take() is not None:
                assert time.monotonic() - began < 10.0, "the stalled daemon's hold never ran out"
                await asyncio.sleep(0.1)
        finally:
            daemon.process.send_signal(signal.SIGCONT)
        assert await asyncio.wait_for(daemon.process.wait(), 60) == 1
        log = daemon.log()
        assert f"stopped: the journal {name} was taken over by pid {os.getpid()} on {socket.gethostname()}" in log, log[
            -3000:
        ]
        assert "Traceback" not in log
        await intruder.release()
    finally:
        await journal.aclose()
