"""Attacks on a conversation's session: failures that must reach the chat exactly once, turns
that must always end, thoughts the daemon can never answer (the real Codex CLI and the
scripted model server)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from agent_harness import AgentHarness, make_responder, replies

from coven_codex.entries import BaseEntry, ErrorEntry, StatusEntry
from coven_codex.rollout import TURN_END_STATES
from coven_codex.support.limits import MAX_THOUGHT_CHARS
from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.processes import codex_processes
from coven_codex.testing.responders import echo_responder
from coven_codex.testing.steps import HttpError, Reply, Stall

pytestmark = [pytest.mark.codex, pytest.mark.timeout(240)]

Factory = Callable[[Path, ScriptedModelServer], AgentHarness]


def errors_of(entries: list[BaseEntry], conversation: str) -> list[ErrorEntry]:
    """The error entries of one conversation."""
    return [e for e in entries if isinstance(e, ErrorEntry) and e.conversation == conversation]


def turn_ends_of(entries: list[BaseEntry], conversation: str) -> list[StatusEntry]:
    """The turn-end status entries of one conversation."""
    return [
        e
        for e in entries
        if isinstance(e, StatusEntry) and e.conversation == conversation and e.state in TURN_END_STATES
    ]


async def test_failed_turns_before_start_give_one_error_each(codex_bin: Path, harness_factory: Factory) -> None:
    """Six conversations whose first thought fails with 401, written before the daemon starts:
    each gets exactly one AUTH error and one turn end (session and egress both know the error)."""
    conversations = [f"c{i}" for i in range(6)]
    async with ScriptedModelServer([HttpError(401, "Incorrect API key provided", times=1000)]) as server:
        h = harness_factory(codex_bin, server)
        for conversation in conversations:
            await h.think(conversation, "fail 401")
        daemon = await h.start()
        await h.wait_for(
            lambda es: all(turn_ends_of(es, c) and errors_of(es, c) for c in conversations),
            what="an error and a turn end in every conversation",
        )
        await asyncio.sleep(2.0)  # a duplicate would show up in this time
        assert await h.stop(daemon) == 0
        entries = await h.entries()
        for conversation in conversations:
            assert [e.code for e in errors_of(entries, conversation)] == ["AUTH"], conversation
            assert len(turn_ends_of(entries, conversation)) == 1, conversation


async def test_codex_killed_mid_turn_ends_the_turn_once(codex_bin_169: Path, harness_factory: Factory) -> None:
    """kill -9 of Codex mid-turn: one PROCESS_EXITED error naming the signal (no unrelated stderr
    line), one turn_failed, then the session resumes and answers."""
    responder = make_responder({"slow": lambda r: (Stall(30.0), Reply("never"))})
    async with ScriptedModelServer(responder=responder) as server:
        h = harness_factory(codex_bin_169, server)
        daemon = await h.start()
        await h.think("c", "slow one")
        await server.requests.wait_for(1)
        await h.wait_for(lambda es: any(getattr(e, "state", "") == "turn_started" for e in es), what="turn start")
        for proc in codex_processes(h.codex_home):
            with contextlib.suppress(psutil.Error):
                proc.kill()
        await h.wait_for(lambda es: bool(turn_ends_of(es, "c")), what="the turn's end")
        await h.wait_for(lambda es: any(getattr(e, "state", "") == "session_resumed" for e in es), what="resume")
        await h.think("c", "after the kill")
        await h.wait_for(lambda es: "echo: after the kill" in replies(es, "c"), what="the reply after the kill")
        # the reply is written before its turn's end: stopping now would interrupt that turn
        await h.wait_for(lambda es: len(turn_ends_of(es, "c")) == 2, what="the second turn's end")
        assert await h.stop(daemon) == 0
        entries = await h.entries()
        errors = errors_of(entries, "c")
        assert [e.code for e in errors] == ["PROCESS_EXITED"], [e.text for e in errors]
        assert "signal 9" in errors[0].text and "bubblewrap" not in errors[0].text
        assert [e.state for e in turn_ends_of(entries, "c")] == ["turn_failed", "turn_completed"]


async def test_a_thought_over_codex_input_limit_gets_one_error(codex_bin: Path, harness_factory: Factory) -> None:
    """Codex refuses input over 2**20 characters ("Input exceeds the maximum length of 1048576
    characters"): the daemon refuses it first, with one error entry, and goes on."""
    async with ScriptedModelServer(responder=echo_responder) as server:
        h = harness_factory(codex_bin, server)
        daemon = await h.start()
        await h.think("c", "x" * (MAX_THOUGHT_CHARS + 1))
        await h.think("c", "small after")
        await h.wait_for(lambda es: "echo: small after" in replies(es, "c"), what="the reply to the next thought")
        await asyncio.sleep(1.0)
        assert await h.stop(daemon) == 0
        errors = errors_of(await h.entries(), "c")
        assert [e.code for e in errors] == ["REFUSED"], [e.text for e in errors]
        assert "Shorten" in errors[0].hint
        assert len(server.requests.responses_requests()) == 1
        assert "no rollout file" not in daemon.log()


async def test_a_huge_conversation_name_is_refused_not_a_crash_loop(
    codex_bin_169: Path, harness_factory: Factory
) -> None:
    """A valid thought whose conversation name is ~16 MiB (every daemon entry for it would exceed
    the journal's line limit): one error entry in the cut name, no session, no log flood."""
    async with ScriptedModelServer(responder=echo_responder) as server:
        h = harness_factory(codex_bin_169, server)
        name = "n" * (16 * 1024 * 1024 - 200)
        await h.think(name, "hi")
        daemon = await h.start()
        await h.think("c", "hello")
        await h.wait_for(lambda es: "echo: hello" in replies(es, "c"), what="the other conversation's reply")
        await asyncio.sleep(2.0)
        assert await h.stop(daemon) == 0
        entries = await h.entries()
        refused = [e for e in entries if isinstance(e, ErrorEntry) and e.code == "REFUSED"]
        assert len(refused) == 1 and refused[0].conversation == name[:255] + "…"
        assert len([e for e in entries if isinstance(e, ErrorEntry)]) == 1
        assert daemon.log_path.stat().st_size < 1_000_000
        restarted = await h.start()  # read again after a restart: not reported twice
        # SIGTERM before the daemon is up would meet Python's default handler (exit -15): wait
        # until it has read the journal and is serving.
        await h.until_logged("ready (pid")
        await asyncio.sleep(2.0)
        assert await h.stop(restarted) == 0
        assert len([e for e in await h.entries() if isinstance(e, ErrorEntry)]) == 1


async def test_a_broken_state_directory_backs_off_and_is_reported_once(
    codex_bin_169: Path, harness_factory: Factory, tmp_path: Path
) -> None:
    """The state directory breaks mid-run (its sessions folder replaced by a file): a new
    conversation's session fails at every start; it restarts with backoff, not once a second,
    and the conversation gets one error, not one per restart."""
    async with ScriptedModelServer(responder=echo_responder) as server:
        h = harness_factory(codex_bin_169, server)
        state = tmp_path / "state"
        daemon = await h.start("--state-dir", str(state))
        await h.think("a", "hello")
        await h.wait_for(lambda es: "echo: hello" in replies(es, "a"), what="the first reply")
        sessions = h.sessions_dir(state)
        shutil.rmtree(sessions)
        sessions.write_text("not a directory")
        await h.think("b", "hello b")
        await asyncio.sleep(8.0)
        entries = await h.entries()
        sessions.unlink()
        sessions.mkdir()
        assert await h.stop(daemon) == 0
        started = [
            e for e in entries if isinstance(e, StatusEntry) and e.conversation == "b" and e.state == "session_started"
        ]
        assert len(errors_of(entries, "b")) == 1, [e.text for e in errors_of(entries, "b")]
        assert 2 <= len(started) <= 4, len(started)  # after 0, 1, 3 and 7 s; once a second before
