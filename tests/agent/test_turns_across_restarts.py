"""What the chat is told about turns and threads a restart cut short (issue 29, items 4a and 4b).

The daemon is a real process (``python -m coven_codex run``) driving the real Codex CLI 0.169.0
against the scripted model server:

- a turn running when the daemon is killed (``kill -9``) gets exactly one end ``status`` after
  the restart, ``turn_aborted`` "interrupted by a restart", with the turn's deterministic id (the
  id egress would give the end Codex records), unless the rollout records the end itself;
- when the conversation's thread cannot be resumed (its rollout is gone) and Codex starts a new
  one, the chat gets one ``status`` ``thread_lost`` saying the model lost the earlier turns.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from agent_harness import AgentHarness, Daemon, make_responder, replies

from coven_codex.agent.state import state_file_name
from coven_codex.entries import BaseEntry, StatusEntry
from coven_codex.rollout import TURN_ABORTED, TURN_COMPLETED, TURN_END_STATES, TURN_STARTED, turn_entry_id
from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.processes import codex_processes
from coven_codex.testing.responders import echo_responder
from coven_codex.testing.steps import Reply, Stall

pytestmark = [pytest.mark.codex, pytest.mark.timeout(240)]

Factory = Callable[[Path, ScriptedModelServer], AgentHarness]


def statuses(entries: list[BaseEntry], conversation: str, *states: str) -> list[StatusEntry]:
    """The ``status`` entries of ``conversation`` in one of ``states``."""
    return [e for e in entries if isinstance(e, StatusEntry) and e.conversation == conversation and e.state in states]


async def until_delivered(h: AgentHarness, conversation: str, text: str) -> None:
    """Wait (at most 30 s) until the daemon saved the thought ``text`` as delivered (Codex recorded
    it: the restart does not send it again; the turn it started was saved running before)."""
    path = h.sessions_dir() / state_file_name(conversation)
    thought = next(e.id for e in await h.entries() if e.kind == "thought" and e.text == text)
    deadline = time.monotonic() + 30
    while True:
        lines = path.read_bytes().splitlines() if path.exists() else []
        state = json.loads(lines[-1]) if lines else {}
        if thought in state.get("delivered", {}) and state.get("in_flight") is None:
            return
        assert time.monotonic() < deadline, f"the daemon never saved thought {thought} as delivered"
        await asyncio.sleep(0.05)


async def kill9_with_codex(h: AgentHarness, daemon: Daemon) -> None:
    """``kill -9`` the daemon and every Codex process at the same moment (stopped first, so none
    writes a line after the daemon is gone)."""
    codex = codex_processes(h.codex_home)
    assert codex
    for process in codex:
        with contextlib.suppress(psutil.Error):
            process.suspend()
    await h.kill9(daemon)
    for process in codex:
        with contextlib.suppress(psutil.Error):
            process.kill()
    await asyncio.to_thread(psutil.wait_procs, codex, 10)


async def test_a_turn_cut_by_kill9_gets_one_end_interrupted_by_a_restart(
    codex_bin_169: Path, harness_factory: Factory
) -> None:
    responder = make_responder({"slow": lambda _request: [Stall(120.0), Reply("never")]})
    async with ScriptedModelServer(responder=responder) as server:
        h = harness_factory(codex_bin_169, server)
        daemon = await h.start()
        await h.think("cut", "slow one")
        started = await h.wait_for(lambda es: statuses(es, "cut", TURN_STARTED) != [], what="the slow turn's start")
        turn = statuses(started, "cut", TURN_STARTED)[0]
        assert turn.turn_id is not None and turn.thread_id is not None
        await until_delivered(h, "cut", "slow one")
        # The daemon and its Codex die at once (a power cut, the OOM killer taking the control
        # group): Codex records nothing more, not even the turn's end.
        await kill9_with_codex(h, daemon)

        daemon = await h.start()
        ended = await h.wait_for(
            lambda es: statuses(es, "cut", *TURN_END_STATES) != [], what="the cut turn's end after the restart"
        )
        await h.think("cut", "after the restart")
        entries = await h.wait_for(
            lambda es: (
                "echo: after the restart" in replies(es, "cut") and len(statuses(es, "cut", *TURN_END_STATES)) == 2
            ),
            what="the next turn's reply and end",
        )
        assert await h.stop(daemon) == 0
        ends = statuses(await h.entries(), "cut", *TURN_END_STATES)
        cut_short = [e for e in ends if e.turn_id == turn.turn_id]
        assert len(cut_short) == 1, ends
        assert cut_short[0].state == TURN_ABORTED
        assert cut_short[0].text == "turn aborted: interrupted by a restart"
        assert cut_short[0].id == turn_entry_id(turn.thread_id, turn.turn_id, "end")
        assert cut_short[0] in statuses(ended, "cut", *TURN_END_STATES)  # written at start-up, not later
        assert [e.state for e in ends if e.turn_id != turn.turn_id] == [TURN_COMPLETED]
        twice = {i: n for i, n in Counter(e.id for e in entries).items() if n > 1}
        assert not twice


async def test_a_turn_that_ended_before_the_kill9_gets_no_second_end(
    codex_bin_169: Path, model_server: ScriptedModelServer, harness_factory: Factory
) -> None:
    h = harness_factory(codex_bin_169, model_server)
    daemon = await h.start()
    await h.think("done", "quick")
    await h.wait_for(lambda es: statuses(es, "done", *TURN_END_STATES) != [], what="the turn's end")
    await h.kill9(daemon)
    daemon = await h.start()
    await h.think("done", "again")
    await h.wait_for(lambda es: "echo: again" in replies(es, "done"), what="the reply after the restart")
    await h.wait_for(lambda es: len(statuses(es, "done", *TURN_END_STATES)) == 2, what="the second turn's end")
    assert await h.stop(daemon) == 0
    ends = statuses(await h.entries(), "done", *TURN_END_STATES)
    assert [e.state for e in ends] == [TURN_COMPLETED, TURN_COMPLETED], ends


async def test_a_thread_that_cannot_be_resumed_tells_the_chat_the_model_lost_the_earlier_turns(
    codex_bin_169: Path, harness_factory: Factory
) -> None:
    async with ScriptedModelServer(responder=echo_responder) as server:
        h = harness_factory(codex_bin_169, server)
        daemon = await h.start()
        await h.think("lost", "remember me")
        first = await h.wait_for(lambda es: replies(es, "lost") == ["echo: remember me"], what="the first reply")
        old_thread = next(e.thread_id for e in statuses(first, "lost", TURN_STARTED))
        assert await h.stop(daemon) == 0
        rollouts = list((h.codex_home / "sessions").rglob(f"rollout-*{old_thread}.jsonl"))
        assert len(rollouts) == 1
        rollouts[0].unlink()  # Codex can no longer resume the thread

        daemon = await h.start()
        await h.think("lost", "do you remember?")
        entries = await h.wait_for(
            lambda es: "echo: do you remember?" in replies(es, "lost"), what="the reply on the new thread"
        )
        assert await h.stop(daemon) == 0
        entries = await h.entries()
        lost = statuses(entries, "lost", "thread_lost")
        assert len(lost) == 1, [(e.kind, e.text) for e in entries if e.conversation == "lost"]
        new_thread = lost[0].thread_id
        assert new_thread is not None and new_thread != old_thread
        assert lost[0].text == (
            f"Codex could not resume thread {old_thread} and started thread {new_thread}: "
            "the model no longer sees the earlier turns of this conversation"
        )
        # Said before the reply it concerns.
        reply = next(e for e in entries if e.kind == "response" and e.text == "echo: do you remember?")
        assert entries.index(lost[0]) < entries.index(reply)
