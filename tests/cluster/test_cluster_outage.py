"""A cluster daemon and Redis faults: Redis frozen at shutdown, stopped and restarted (AOF), frozen
past the lease time. Real daemons (``python -m coven_codex run --cluster``), the real Codex CLI, a
``redis-server`` of the test's own (it is stopped and frozen here, so never the session's)."""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cluster_harness import ClusterHarness, user_prompts
from redis.asyncio import Redis

from coven_codex.cluster.keys import ClusterKeys
from coven_codex.conversation.manager import SHUTDOWN_SLACK
from coven_codex.daemon.watchdog import SHUTDOWN_WATCHDOG_MARGIN
from coven_codex.entries import BaseEntry, ThoughtEntry
from coven_codex.journal.redis import RedisJournal
from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.redis_server import RedisServer
from coven_codex.testing.responders import echo_responder

pytestmark = [pytest.mark.codex, pytest.mark.timeout(600)]

KILL_GRACE = 3.0
"""The harness runs every daemon with ``--kill-grace 3``."""
SHUTDOWN_BOUND = KILL_GRACE + SHUTDOWN_SLACK + SHUTDOWN_WATCHDOG_MARGIN
"""The daemon's own promise for a shutdown (docs/operations.md), its watchdog's margin included."""


@pytest.fixture
async def model() -> AsyncIterator[ScriptedModelServer]:
    async with ScriptedModelServer(responder=echo_responder) as server:
        yield server


def answered(entries: list[BaseEntry], texts: set[str]) -> bool:
    return {f"echo: {t}" for t in texts} <= {e.text for e in entries if e.kind == "response"}


async def test_sigterm_while_redis_is_frozen_stops_cleanly_within_the_shutdown_bound(
    tmp_path: Path, codex_bin_169: Path, model: ScriptedModelServer
) -> None:
    """Redis answers nothing (SIGSTOP) when the daemon is told to stop: every Redis call of the
    shutdown (the last mirror, the hand-over, the pub/sub connection, the cursor) gives up in time,
    the daemon says once that the leases run out instead, and exits 0 within kill_grace plus its
    slack. Restarted once Redis runs again, it takes its conversation back and answers."""
    with RedisServer(tmp_path / "redis") as redis:
        h = ClusterHarness(tmp_path, codex_bin_169, model, redis, nodes=1, lease=3.0)
        node = h.nodes[0]
        try:
            await h.start(node)
            await h.until_ready(node)
            await h.think("red", "red thought 0")
            await h.wait_for(lambda es: answered(es, {"red thought 0"}), timeout=120, what="the first reply")
            redis.pause()
            started = time.monotonic()
            code = await h.stop(node, timeout=SHUTDOWN_BOUND)
            took = time.monotonic() - started
            log = node.log()
            assert code == 0, f"exit status {code} after {took:.1f}s:\n{log[-4000:]}"
            assert "daemon stopped cleanly" in log
            assert log.count("the leases run out") == 1, log[-4000:]
            redis.resume()

            await h.start(node)
            await h.until_ready(node)
            await h.think("red", "red thought 1")
            entries = await h.wait_for(lambda es: answered(es, {"red thought 1"}), timeout=120, what="the reply")
            assert await h.stop(node) == 0
        finally:
            left = await h.cleanup()
    assert not left, f"Codex processes left behind: {left}"
    replies = Counter(e.text for e in entries if e.kind == "response")
    assert replies == {"echo: red thought 0": 1, "echo: red thought 1": 1}
    prompts = [user_prompts(r) for r in model.requests.responses_requests()]
    assert prompts[-1] == ["red thought 0", "red thought 1"]  # the thread went on with its history


async def test_redis_stopped_and_frozen_under_two_cluster_daemons_every_thought_answered_once(
    tmp_path: Path, codex_bin_169: Path, model: ScriptedModelServer
) -> None:
    """Redis is stopped (SIGTERM, AOF flushed) and started again after more than a lease time, then
    frozen (SIGSTOP) for two lease times while turns run. Thoughts written meanwhile wait; every
    thought reaches Codex once and is answered once, later turns see earlier ones; the outage is
    said once per daemon (not once per retry) and never as a chat entry; the leases, run out in
    Redis's clock, are taken again with larger fencing tokens."""
    lease = 3.0
    conversations = [f"conversation-{i}" for i in range(4)]
    sent: dict[str, list[str]] = {c: [] for c in conversations}
    # appendfsync always: what Redis acknowledged survives a stop (docs/journal-protocol.md)
    with RedisServer(tmp_path / "redis", extra_args=("--appendfsync", "always")) as redis:
        h = ClusterHarness(tmp_path, codex_bin_169, model, redis, nodes=2, lease=lease)
        writer = RedisJournal.from_url(h.journal_name)

        async def think_all(turn: int) -> set[str]:
            texts = {f"{c} thought {turn}" for c in conversations}
            for c in conversations:
                sent[c].append(f"{c} thought {turn}")
            await asyncio.gather(
                *(writer.append(ThoughtEntry(conversation=c, text=f"{c} thought {turn}")) for c in conversations)
            )
            return texts

        try:
            for node in h.nodes:
                await h.start(node)
            for node in h.nodes:
                await h.until_ready(node)
            texts = await think_all(0)
            await h.wait_for(lambda es: answered(es, texts), timeout=120, what="the first replies")

            # 1: Redis stopped for longer than a lease; thoughts written meanwhile wait with their writer
            redis.stop()
            waiting = asyncio.create_task(think_all(1))
            await asyncio.sleep(lease * 2)
            assert not waiting.done()
            redis.start()
            texts = await asyncio.wait_for(waiting, 60)
            await h.wait_for(lambda es: answered(es, texts), timeout=120, what="the replies after the restart")

            # 2: Redis frozen for two lease times while turns run
            texts = await think_all(2)
            redis.pause()
            await asyncio.sleep(lease * 2)
            redis.resume()
            await h.wait_for(lambda es: answered(es, texts), timeout=120, what="the replies after the freeze")

            texts = await think_all(3)
            entries = await h.wait_for(lambda es: answered(es, texts), timeout=120, what="the last replies")
            codes = [await h.stop(node) for node in h.nodes]
            client = Redis.from_url(redis.url())
            keys = ClusterKeys(writer.location.key)
            tokens = [int(await client.get(keys.counter(c)) or 0) for c in conversations]
            await client.aclose()
        finally:
            await writer.aclose()
            left = await h.cleanup()
    assert not left, f"Codex processes left behind: {left}"
    assert codes == [0, 0]

    requests = model.requests.responses_requests()
    newest = Counter(user_prompts(r)[-1] for r in requests if user_prompts(r))
    assert not {t: n for t, n in newest.items() if n > 1}, "a thought was handed to Codex twice"
    for c in conversations:
        last = [r for r in requests if user_prompts(r) and user_prompts(r)[-1] == f"{c} thought 3"]
        assert len(last) == 1 and user_prompts(last[0]) == sent[c], (c, [user_prompts(r) for r in last])
    replies = Counter((e.conversation, e.text) for e in entries if e.kind == "response")
    assert replies == Counter({(c, f"echo: {t}"): 1 for c in conversations for t in sent[c]})
    assert not [e for e in entries if e.kind == "error"], [e.text for e in entries if e.kind == "error"]
    ids = Counter(e.id for e in entries)
    assert not {i: n for i, n in ids.items() if n > 1}
    assert all(token >= 2 for token in tokens), tokens  # every lease was taken again after the outage
    for node in h.nodes:
        # The stop is said once (and its end once) for the journal and the cluster together, not once
        # per retry or per conversation; a freeze shorter than a reply's timeout is no outage at all.
        said = [line for line in node.log().splitlines() if re.search(r" (WARNING|ERROR) .*(Redis|onnect)", line)]
        assert len(said) == 2, "\n".join(said)
        assert "cannot be reached" in said[0] and "is reachable again" in said[1], "\n".join(said)
