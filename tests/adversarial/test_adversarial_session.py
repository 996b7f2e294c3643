"""Attacks on a conversation's session: failures that must reach the chat exactly once, turns
that must always end, thoughts the daemon can never answer (the real Codex CLI and the
scripted model server)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_harness import AgentHarness

from coven_codex.entries import BaseEntry, ErrorEntry, StatusEntry
from coven_codex.rollout import TURN_END_STATES
from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.steps import HttpError

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
