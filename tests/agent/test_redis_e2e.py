"""End to end on a Redis journal: the daemon, Codex 0.169.0 and the scripted model; Redis killed mid-conversation."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_harness import AgentHarness, replies, user_prompts

from coven_codex.entries import BaseEntry
from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.redis_server import RedisServer

pytestmark = [pytest.mark.codex, pytest.mark.timeout(300)]

Factory = Callable[[Path, ScriptedModelServer, str], AgentHarness]
CONVERSATIONS = ("alpha", "beta")


def completed(entries: list[BaseEntry], conversation: str) -> int:
    return sum(
        1
        for e in entries
        if e.kind == "status" and e.conversation == conversation and getattr(e, "state", None) == "turn_completed"
    )


async def test_redis_killed_and_restarted_mid_conversation_every_thought_answered_once(
    codex_bin_169: Path, model_server: ScriptedModelServer, harness_factory: Factory, tmp_path: Path
) -> None:
    # appendfsync always: what Redis acknowledged survives its kill -9 (see docs/journal-protocol.md)
    with RedisServer(tmp_path / "redis", extra_args=("--appendfsync", "always")) as redis:
        h = harness_factory(codex_bin_169, model_server, redis.url(key="chat"))
        daemon = await h.start()
        await h.until_logged("ready (pid")

        async def think_all(turn: int) -> None:
            await asyncio.gather(*(h.think(c, f"{c} question {turn}") for c in CONVERSATIONS))

        async def until_turns(count: int) -> None:
            await h.wait_for(
                lambda es: all(completed(es, c) >= count for c in CONVERSATIONS),
                timeout=120,
                what=f"{count} completed turns per conversation",
            )

        await think_all(0)
        await until_turns(1)
        # 1: Redis killed while the daemon is answering (its replies and cursor saves wait)
        await think_all(1)
        redis.kill()
        await asyncio.sleep(2)
        redis.start()
        await until_turns(2)
        # 2: thoughts written while Redis is down wait with their writer, then are answered
        redis.kill()
        waiting = asyncio.create_task(think_all(2))
        await asyncio.sleep(2)
        assert not waiting.done()
        redis.start()
        await asyncio.wait_for(waiting, 60)
        await think_all(3)
        await until_turns(4)
        assert await h.stop(daemon) == 0
        entries = await h.entries()

    for conversation in CONVERSATIONS:
        assert replies(entries, conversation) == [f"echo: {conversation} question {t}" for t in range(4)]
        assert completed(entries, conversation) == 4
    ids = [e.id for e in entries]
    assert len(ids) == len(set(ids))
    # each thought reached Codex once: the model saw each question as a new prompt exactly once
    last_prompts = [user_prompts(r)[-1] for r in model_server.requests.responses_requests() if user_prompts(r)]
    for conversation in CONVERSATIONS:
        for turn in range(4):
            assert last_prompts.count(f"{conversation} question {turn}") == 1
    log = daemon.log()
    assert log.count("cannot be reached") == 2, log[-4000:]
    assert log.count("is reachable again") == 2
