"""Start-up recovery reads only what a restart may repeat, not the journal's length (issue 18, items 1-2).

The daemon (a real process, Codex 0.169.0, the scripted model server) keeps a *replay window* per
conversation (``coven_codex/agent/replay.py``): a conversation that is idle when the daemon stops
has none, so however much the journal grew since, start-up reads it only from the ingress cursor
(and keeps only the ids found there); a conversation whose turn a ``kill -9`` cut short has one,
which the next run reads from, then closes once egress has passed the rollout.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_harness import AgentHarness, make_responder, replies

from coven_codex.agent.ingress import CURSOR_NAME
from coven_codex.agent.state import state_file_name
from coven_codex.entries import BaseEntry, ResponseEntry
from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.steps import Reply, Stall

pytestmark = [pytest.mark.codex, pytest.mark.timeout(300)]

Factory = Callable[[Path, ScriptedModelServer], AgentHarness]
RECOVERY = re.compile(r"recovery: read the journal from (\S+) \((\d+) entr")
TRAFFIC = 3000


def saved_state(h: AgentHarness, conversation: str) -> dict[str, object]:
    """The newest state ``conversation``'s log holds on disk."""
    lines = (h.state_dir / "sessions" / state_file_name(conversation)).read_bytes().splitlines()
    state = json.loads(lines[-1])
    assert isinstance(state, dict)
    return state


async def until_closed(h: AgentHarness, conversation: str) -> None:
    """Wait (at most 30 s) until ``conversation``'s saved state has no replay window."""
    deadline = time.monotonic() + 30
    while saved_state(h, conversation)["replay_from"] is not None:
        assert time.monotonic() < deadline, f"the replay window of {conversation!r} stayed open"
        await asyncio.sleep(0.05)


async def recovery_of(h: AgentHarness) -> tuple[str, int]:
    """Where the newest daemon's start-up read the journal from, and how many of its entries it met."""
    log = await h.until_logged("recovery: read the journal from")
    found = RECOVERY.findall(log)
    assert len(found) == 1, found
    return found[0][0], int(found[0][1])


def states(entries: list[BaseEntry], state: str) -> list[BaseEntry]:
    """The ``status`` entries of ``state``."""
    return [e for e in entries if e.kind == "status" and getattr(e, "state", None) == state]


def assert_each_id_once(entries: list[BaseEntry]) -> None:
    twice = {i: n for i, n in Counter(e.id for e in entries).items() if n > 1}
    assert not twice, f"entries written twice: {twice}"


async def test_an_idle_conversation_does_not_pull_start_up_back_to_its_old_position(
    codex_bin_169: Path, model_server: ScriptedModelServer, harness_factory: Factory
) -> None:
    h = harness_factory(codex_bin_169, model_server)
    daemon = await h.start()
    await h.think("idle", "hello")
    await h.wait_for(lambda es: len(states(es, "turn_completed")) == 1, what="the first turn's end")
    # Idle: its window closes while the daemon runs, so even a kill -9 leaves nothing to replay.
    await until_closed(h, "idle")
    await h.kill9(daemon)
    # The journal grows by other conversations' traffic, which a running daemon read (its cursor
    # is past it): daemon entries of 3,000 other turns.
    for index in range(TRAFFIC):
        await h.append(ResponseEntry(id=f"other-thread:{index}:0", conversation=f"other-{index % 50}", text="x"))
    end = await h.journal.end_position()
    await h.journal.save_cursor(CURSOR_NAME, end)

    daemon = await h.start()
    start, found = await recovery_of(h)
    assert (start, found) == (str(end), 0)  # not from the idle conversation's months-old turn
    await h.think("idle", "again")
    await h.wait_for(lambda es: replies(es, "idle") == ["echo: hello", "echo: again"], what="the reply after it")
    assert await h.stop(daemon) == 0
    assert_each_id_once(await h.entries())
    assert saved_state(h, "idle")["replay_from"] is None


async def test_a_turn_cut_by_kill9_is_replayed_from_its_window_which_then_closes(
    codex_bin_169: Path, harness_factory: Factory
) -> None:
    responder = make_responder({"slow": lambda _request: [Stall(60.0), Reply("late")]})
    async with ScriptedModelServer(responder=responder) as server:
        h = harness_factory(codex_bin_169, server)
        daemon = await h.start()
        await h.think("busy", "warm up")
        await h.wait_for(lambda es: replies(es, "busy") == ["echo: warm up"], what="the first reply")
        await h.wait_for(lambda es: len(states(es, "turn_completed")) == 1, what="the first turn's end")
        before = await h.journal.end_position()
        await h.think("busy", "slow one")
        # The turn is under way in the journal: its start and its user message, entries of
        # rollout lines, are written; Codex now waits on the stalled model.
        await h.wait_for(lambda es: len(states(es, "turn_started")) == 2, what="the slow turn's start")
        await h.kill9(daemon)
        window = saved_state(h, "busy")["replay_from"]
        assert window is not None

        daemon = await h.start()
        start, found = await recovery_of(h)
        assert found > 0  # the cut turn's entries, read again from its window ...
        assert int(start) >= before  # ... from the cut turn on, not from the journal's start
        await h.think("busy", "after the crash")
        await h.wait_for(lambda es: "echo: after the crash" in replies(es, "busy"), what="the reply after the crash")
        await h.wait_for(lambda es: len(states(es, "turn_completed")) == 2, what="the last turn's end")
        assert await h.stop(daemon) == 0
        assert_each_id_once(await h.entries())
        assert saved_state(h, "busy")["replay_from"] is None  # ... and closed once egress passed it

        daemon = await h.start()
        start, found = await recovery_of(h)
        assert (start, found) == (str(await h.journal.end_position()), 0)
        assert await h.stop(daemon) == 0
