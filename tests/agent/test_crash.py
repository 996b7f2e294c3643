"""Crash tests: ``kill -9`` of the daemon at random moments while thoughts flow in.

A writer appends thoughts to three conversations (interleaved, many while turns run) while
the daemon (``python -m coven_codex run`` with the real Codex, 0.169.0's app-server or 0.47.0's
exec, and the scripted model server) is killed with SIGKILL and restarted again and again. At the end one more
thought per conversation is sent with the daemon left alone, and then:

- every thought reached Codex exactly once: the model's last request of each conversation
  holds that conversation's thoughts, each exactly once, in order; and no thought was the
  newest prompt of two requests (it was never handed to Codex twice);
- every rollout entry reached the journal exactly once: re-translating every rollout file gives
  exactly the set of egress entry ids found in the journal (besides the turn ends the session
  wrote because the rollout holds none), and no id appears twice;
- every reply is in the right conversation, and no Codex process is left.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_harness import AgentHarness, codex_processes, user_prompts

from coven_codex.entries import BaseEntry
from coven_codex.rollout import RolloutTranslator
from coven_codex.tailing import LineSplitter
from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.responders import echo_responder

pytestmark = [pytest.mark.codex]

Factory = Callable[[Path, ScriptedModelServer], AgentHarness]
CONVERSATIONS = ("red", "green", "blue")


def rollout_entries(codex_home: Path, conversation_of: dict[str, str]) -> list[BaseEntry]:
    """Every entry the translator makes from every rollout file (ids are deterministic)."""
    entries: list[BaseEntry] = []
    for path in sorted((codex_home / "sessions").rglob("rollout-*.jsonl")):
        thread_id = path.stem[-36:]
        translator = RolloutTranslator(conversation_of.get(thread_id, "?"), thread_id)
        splitter = LineSplitter(0)
        for line in splitter.feed(path.read_bytes()):
            entries.extend(translator.feed(line))
    return entries


async def crash_loop(h: AgentHarness, server: ScriptedModelServer, *, thoughts: int, kills: int, seed: int) -> None:
    rng = random.Random(seed)
    sent: dict[str, list[str]] = {c: [] for c in CONVERSATIONS}

    async def writer() -> None:
        for index in range(thoughts):
            conversation = rng.choice(CONVERSATIONS)
            text = f"{conversation} thought {index}"
            sent[conversation].append(text)
            await h.think(conversation, text)
            await asyncio.sleep(rng.uniform(0.0, 0.25))

    writing = asyncio.create_task(writer())
    started = time.monotonic()
    for _ in range(kills):
        daemon = await h.start()
        await asyncio.sleep(rng.uniform(0.2, 2.5))
        await h.kill9(daemon)
    await writing
    daemon = await h.start()
    for conversation in CONVERSATIONS:
        sent[conversation].append(f"{conversation} final")
        await h.think(conversation, f"{conversation} final")
    finals = {f"echo: {c} final" for c in CONVERSATIONS}
    await h.wait_for(
        lambda es: finals <= {e.text for e in es if e.kind == "response"},
        timeout=120,
        what="the final replies",
        while_progressing=True,  # 200 turns take what the machine's load makes them take
    )
    assert await h.stop(daemon) == 0
    elapsed = time.monotonic() - started
    print(f"crash loop: {thoughts} thoughts, {kills} kills, {elapsed:.1f}s")

    # -- every thought reached Codex exactly once ------------------------------------------------
    requests = server.requests.responses_requests()
    newest = Counter(user_prompts(r)[-1] for r in requests if user_prompts(r))
    twice = {text: n for text, n in newest.items() if n > 1}
    assert not twice, f"thoughts handed to Codex more than once: {twice}"
    for conversation in CONVERSATIONS:
        final = [r for r in requests if user_prompts(r) and user_prompts(r)[-1] == f"{conversation} final"]
        assert len(final) == 1
        history = user_prompts(final[0])
        assert history == sent[conversation], f"history of {conversation} differs:\n{history}\n{sent[conversation]}"

    # -- every rollout entry reached the journal exactly once -------------------------------------
    journal = await h.entries()
    ours = [e for e in journal if e.sender == "codex" and e.id and e.id.count(":") == 2]
    counts = Counter(e.id for e in ours)
    assert not [i for i, n in counts.items() if n > 1], "entries appended twice"
    conversation_of = {getattr(e, "thread_id", None) or "": e.conversation for e in journal if e.kind == "response"}
    expected = {e.id for e in rollout_entries(h.codex_home, conversation_of)}
    # A turn's end (and error) has an id of the turn, whoever writes it: the session writes those the
    # rollout does not hold (0.47 records no turn end), so the journal may hold more of them.
    from_the_session = {i for i in set(counts) - expected if i.split(":")[1].startswith("turn-")}
    assert expected == set(counts) - from_the_session, "journal and rollouts disagree"
    for entry in journal:
        if entry.kind == "response":
            assert entry.text.startswith(f"echo: {entry.conversation} "), entry
    assert (
        len({getattr(e, "thread_id", None) for e in journal if e.kind == "response" and e.conversation == "red"}) == 1
    )
    assert not codex_processes(h.codex_home)


async def test_kill9_daemon_short(codex_bin_169: Path, harness_factory: Factory) -> None:
    async with ScriptedModelServer(responder=echo_responder) as server:
        h = harness_factory(codex_bin_169, server)
        await crash_loop(h, server, thoughts=30, kills=5, seed=7)


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_kill9_daemon_200_thoughts_25_kills(codex_bin_169: Path, harness_factory: Factory) -> None:
    async with ScriptedModelServer(responder=echo_responder) as server:
        h = harness_factory(codex_bin_169, server)
        await crash_loop(h, server, thoughts=200, kills=25, seed=2026)


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_kill9_daemon_exec_driver_047_200_thoughts_25_kills(
    codex_bin_047: Path, harness_factory: Factory
) -> None:
    async with ScriptedModelServer(responder=echo_responder) as server:
        h = harness_factory(codex_bin_047, server)
        # An exec orphaned by the kill goes on until its stdout pipe breaks, which can be between
        # writing the prompt into the thread's history and writing its user_message event.
        await crash_loop(h, server, thoughts=200, kills=25, seed=47)


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_kill9_daemon_steering_169(codex_bin_169: Path, harness_factory: Factory) -> None:
    async with ScriptedModelServer(responder=echo_responder) as server:
        h = harness_factory(codex_bin_169, server)
        h.extra_args = ["--mid-turn", "steer"]
        await crash_loop(h, server, thoughts=60, kills=10, seed=169)
