"""A conversation takes over another's Codex thread (issue 31 item 2, issue 30 item 3's ``/resume``):
the daemon is a real process driving the real Codex CLI 0.169.0 against the scripted model.

- a chat conversation that resumes another's thread (the ``reset`` with ``resume_thread`` chat
  ``/resume`` appends) continues that very thread: the model sees its earlier turn, its rollout
  grows; the other conversation is told the thread moved, and its next thought starts a thread of
  its own: no turn reaches the thread twice, and no turn's entries come from two conversations;
- ``kill -9`` of the daemon right after the take-over: after the restart exactly one
  conversation's state names the thread, and the taker's thought runs in it once.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_harness import AgentHarness, replies, user_prompts
from test_turns_across_restarts import kill9_with_codex

from coven_codex.agent.state import STATE_SUFFIX
from coven_codex.entries import BaseEntry, ResetEntry, StatusEntry
from coven_codex.rollout.locator import thread_id_from_path
from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.request_log import RecordedRequest

pytestmark = [pytest.mark.codex, pytest.mark.timeout(240)]

Factory = Callable[[Path, ScriptedModelServer], AgentHarness]


def rollouts(h: AgentHarness) -> dict[str, int]:
    """Every rollout under the daemon's ``CODEX_HOME``, by thread id, with its number of lines."""
    found: dict[str, int] = {}
    for path in (h.codex_home / "sessions").rglob("rollout-*.jsonl"):
        thread = thread_id_from_path(path)
        assert thread is not None
        found[thread] = len(path.read_bytes().splitlines())
    return found


def rollout_of(h: AgentHarness, thread: str) -> bytes:
    """The rollout of ``thread`` under the daemon's ``CODEX_HOME``."""
    (path,) = [p for p in (h.codex_home / "sessions").rglob("rollout-*.jsonl") if thread_id_from_path(p) == thread]
    return path.read_bytes()


def holders(h: AgentHarness) -> dict[str, str | None]:
    """Each conversation's thread, as its saved state names it (the last complete line of its log)."""
    found: dict[str, str | None] = {}
    for path in h.sessions_dir().glob(f"*{STATE_SUFFIX}"):
        lines = [line for line in path.read_bytes().splitlines() if line.strip()]
        state = json.loads(lines[-1])
        found[state["conversation"]] = state.get("thread_id")
    return found


def thread_of(entries: list[BaseEntry], conversation: str) -> str:
    started = [
        e
        for e in entries
        if isinstance(e, StatusEntry) and e.conversation == conversation and e.state == "session_started"
    ]
    assert started and started[0].thread_id
    return started[0].thread_id


def requests_with(server: ScriptedModelServer, prompt: str) -> list[RecordedRequest]:
    return [r for r in server.requests.responses_requests() if user_prompts(r) and user_prompts(r)[-1] == prompt]


def moved(entries: list[BaseEntry], conversation: str) -> list[StatusEntry]:
    return [
        e
        for e in entries
        if isinstance(e, StatusEntry) and e.conversation == conversation and e.state == "thread_moved"
    ]


def completed(entries: list[BaseEntry], conversation: str) -> int:
    """How many turns of ``conversation`` ended (``turn_completed``)."""
    return sum(
        1
        for e in entries
        if isinstance(e, StatusEntry) and e.conversation == conversation and e.state == "turn_completed"
    )


def one_conversation_per_turn(entries: list[BaseEntry]) -> None:
    """No turn's entries come from two conversations (two sessions translating one thread would)."""
    by_turn: dict[str, set[str]] = defaultdict(set)
    for e in entries:
        turn = getattr(e, "turn_id", None)
        if isinstance(turn, str):
            by_turn[turn].add(e.conversation)
    assert by_turn and all(len(conversations) == 1 for conversations in by_turn.values()), dict(by_turn)


async def test_a_chat_that_resumes_anothers_thread_holds_it_alone(
    codex_bin_169: Path, model_server: ScriptedModelServer, harness_factory: Factory
) -> None:
    h = harness_factory(codex_bin_169, model_server)
    h.write_base_config()
    daemon = await h.start()
    await h.think("red", "remember alpha")
    # (its turn's end, not its reply: a thread taken over while its turn runs has that turn interrupted)
    entries = await h.wait_for(lambda es: completed(es, "red") == 1, what="red's turn")
    thread = thread_of(entries, "red")
    before = rollouts(h)
    await h.append(ResetEntry(conversation="blue", resume_thread=thread))  # (what chat /resume appends)
    entries = await h.wait_for(lambda es: bool(moved(es, "red")), what="red told its thread moved")
    (status,) = moved(entries, "red")
    assert status.thread_id == thread and "'blue'" in status.text
    await h.think("blue", "what came first")
    entries = await h.wait_for(lambda es: "echo: what came first" in replies(es, "blue"), what="blue's reply")
    (request,) = requests_with(model_server, "what came first")
    assert user_prompts(request) == ["remember alpha", "what came first"]  # thread's history, in the thread
    after = rollouts(h)
    assert list(after) == [thread] and after[thread] > before[thread]
    # Red's next thought starts a thread of its own; it never reaches the moved thread.
    await h.think("red", "red again")
    entries = await h.wait_for(lambda es: "echo: red again" in replies(es, "red"), what="red's second reply")
    (request,) = requests_with(model_server, "red again")
    assert user_prompts(request) == ["red again"]
    # (Codex may still be writing the end of blue's turn to the thread's rollout: its length is no witness)
    assert len(rollouts(h)) == 2 and b"red again" not in rollout_of(h, thread)
    await h.think("blue", "and then")
    entries = await h.wait_for(lambda es: completed(es, "blue") == 2, what="blue's second turn")
    assert await h.stop(daemon) == 0
    entries = await h.entries()
    assert replies(entries, "red") == ["echo: remember alpha", "echo: red again"]
    assert replies(entries, "blue") == ["echo: what came first", "echo: and then"]
    one_conversation_per_turn(entries)
    turns_in_thread = [
        e.conversation
        for e in entries
        if isinstance(e, StatusEntry) and e.state == "turn_completed" and e.thread_id == thread
    ]
    statuses = [(e.conversation, e.state, e.thread_id) for e in entries if isinstance(e, StatusEntry)]
    assert turns_in_thread == ["red", "blue", "blue"], statuses
    assert holders(h)["blue"] == thread and holders(h)["red"] not in (None, thread)


async def test_kill9_right_after_a_take_over_leaves_one_holder(
    codex_bin_169: Path, model_server: ScriptedModelServer, harness_factory: Factory
) -> None:
    h = harness_factory(codex_bin_169, model_server)
    h.write_base_config()
    daemon = await h.start()
    await h.think("red", "remember alpha")
    entries = await h.wait_for(lambda es: "echo: remember alpha" in replies(es, "red"), what="red's reply")
    thread = thread_of(entries, "red")
    await h.think("blue", "what came first", resume_thread=thread)
    await h.wait_for(lambda es: bool(moved(es, "red")), what="the take-over")
    await kill9_with_codex(h, daemon)
    assert [c for c, t in holders(h).items() if t == thread] in (["red"], ["blue"], [])
    daemon = await h.start()
    entries = await h.wait_for(lambda es: "echo: what came first" in replies(es, "blue"), what="blue's reply")
    assert [c for c, t in holders(h).items() if t == thread] == ["blue"]
    await h.think("red", "red again")
    await h.wait_for(lambda es: "echo: red again" in replies(es, "red"), what="red's second reply")
    assert await h.stop(daemon) == 0
    entries = await h.entries()
    assert [c for c, t in holders(h).items() if t == thread] == ["blue"]
    assert len(requests_with(model_server, "what came first")) == 1
    (request,) = requests_with(model_server, "red again")
    assert user_prompts(request) == ["red again"]
    assert replies(entries, "blue") == ["echo: what came first"]
    assert len(moved(entries, "red")) == 1
    one_conversation_per_turn(entries)
