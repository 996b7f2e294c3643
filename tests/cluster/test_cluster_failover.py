"""The failover chaos test: 3 daemons on one Redis journal, nothing else shared, killed and stalled.

Each daemon has its own workspace, state directory and ``CODEX_HOME``; they share only Redis (and
the scripted model server, which plays the model provider). A writer appends thoughts to many
conversations while a random daemon is killed with SIGKILL every few seconds and started again,
sometimes within its lease (it takes its own conversations back from its own files), sometimes
after it (the others adopt them from the mirror); once a daemon is stopped with SIGSTOP past its
lease and resumed (its writes must be refused, the others serve its conversations). At the end
one more thought per conversation is sent with the daemons left alone, and then:

- every thought reached Codex exactly once: no thought is the newest prompt of two model
  requests, and the last request of each conversation holds all its thoughts, each once, in
  order (its later turns saw its earlier turns, on whichever daemon they ran);
- every reply is in the journal exactly once (no entry id twice, no reply text twice);
- conversations did move between daemons, and no Codex process is left.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cluster_harness import ClusterHarness, Node, user_prompts

from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.redis_server import RedisServer
from coven_codex.testing.responders import echo_responder

pytestmark = [pytest.mark.codex]


@pytest.fixture
async def model() -> AsyncIterator[ScriptedModelServer]:
    async with ScriptedModelServer(responder=echo_responder) as server:
        yield server


async def chaos(
    tmp_path: Path,
    codex_bin: Path,
    model: ScriptedModelServer,
    redis_server: RedisServer,
    *,
    conversations: int,
    thoughts: int,
    seed: int,
    lease: float = 3.0,
) -> None:
    rng = random.Random(seed)
    h = ClusterHarness(tmp_path, codex_bin, model, redis_server, nodes=3, lease=lease)
    names = [f"conversation-{i:02d}" for i in range(conversations)]
    sent: dict[str, list[str]] = {c: [] for c in names}
    try:
        for node in h.nodes:
            await h.start(node)
        for node in h.nodes:
            await h.until_ready(node)

        async def writer() -> None:
            for index in range(thoughts):
                conversation = rng.choice(names)
                text = f"{conversation} thought {index}"
                sent[conversation].append(text)
                await h.think(conversation, text)
                await asyncio.sleep(rng.uniform(0.0, 0.3))

        writing = asyncio.create_task(writer())
        restarts: list[asyncio.Task[None]] = []
        starting: set[Node] = set()
        kills = stalls = 0
        while not writing.done():
            await asyncio.sleep(rng.uniform(1.0, 3.0))
            running = [n for n in h.nodes if n.running and n not in starting]
            if len(running) < 2:
                continue
            victim: Node = rng.choice(running)
            if stalls == 0 and kills >= 1:
                stalls += 1
                h.signal(victim, signal.SIGSTOP)  # stalled past its lease: the others adopt
                await asyncio.sleep(lease * 1.8)
                h.signal(victim, signal.SIGCONT)  # its writes must now be refused
                continue
            kills += 1
            await h.kill9(victim)
            starting.add(victim)
            down = rng.choice([rng.uniform(0.2, 1.0), lease + rng.uniform(0.5, 2.0)])

            async def restart(node: Node = victim, after: float = down) -> None:
                await asyncio.sleep(after)
                await h.start(node)
                await h.until_ready(node)
                starting.discard(node)

            restarts.append(asyncio.create_task(restart()))
        await writing
        await asyncio.gather(*restarts)
        for node in h.nodes:
            if not node.running:
                await h.start(node)
                await h.until_ready(node)
        for conversation in names:
            sent[conversation].append(f"{conversation} final")
            await h.think(conversation, f"{conversation} final")
        finals = {f"echo: {c} final" for c in names}
        await h.wait_for(
            lambda es: finals <= {e.text for e in es if e.kind == "response"},
            timeout=120,
            what="the final replies",
            while_progressing=True,
        )
        codes = [await h.stop(node) for node in h.nodes]
        assert codes == [0, 0, 0], codes
        print(f"chaos: {thoughts} thoughts, {conversations} conversations, {kills} kills, {stalls} stall(s)")

        # -- every thought reached Codex exactly once; later turns saw the earlier ones ----------------
        requests = model.requests.responses_requests()
        newest = Counter(user_prompts(r)[-1] for r in requests if user_prompts(r))
        twice = {text: n for text, n in newest.items() if n > 1}
        assert not twice, f"thoughts handed to Codex more than once: {twice}"
        for conversation in names:
            final = [r for r in requests if user_prompts(r) and user_prompts(r)[-1] == f"{conversation} final"]
            assert len(final) == 1
            history = user_prompts(final[0])
            assert history == sent[conversation], (conversation, history, sent[conversation])

        # -- every reply in the journal exactly once -------------------------------------------------
        entries = await h.entries()
        ids = Counter(e.id for e in entries)
        assert not {i: n for i, n in ids.items() if n > 1}
        replies = Counter((e.conversation, e.text) for e in entries if e.kind == "response")
        assert not {r: n for r, n in replies.items() if n > 1}, "a reply was written twice"
        for conversation in names:
            assert replies[(conversation, f"echo: {conversation} final")] == 1

        # -- conversations moved between daemons -----------------------------------------------------
        adopted = sum(node.log().count("cluster: adopting conversation") for node in h.nodes)
        assert adopted > 0, "no conversation was ever adopted by another daemon"
    finally:
        left = await h.cleanup()
    assert not left, f"Codex processes left behind: {left}"


async def test_failover_small(
    tmp_path: Path, codex_bin_169: Path, model: ScriptedModelServer, redis_server: RedisServer
) -> None:
    """The chaos test at CI scale: 6 conversations, 40 thoughts."""
    started = time.monotonic()
    await chaos(tmp_path, codex_bin_169, model, redis_server, conversations=6, thoughts=40, seed=14)
    print(f"failover small: {time.monotonic() - started:.1f}s")


@pytest.mark.slow
async def test_failover_chaos(
    tmp_path: Path, codex_bin_169: Path, model: ScriptedModelServer, redis_server: RedisServer
) -> None:
    """The chaos test of issue 14: 3 daemons, 30 conversations, 300 thoughts, kills and a stall."""
    await chaos(tmp_path, codex_bin_169, model, redis_server, conversations=30, thoughts=300, seed=1402)
