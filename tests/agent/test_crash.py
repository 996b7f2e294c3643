"""Crash tests: ``kill -9`` of the daemon, or of the shared app-server, at random moments while
thoughts flow in.

A writer appends thoughts to three (or more) conversations (interleaved, many while turns run) while
the daemon (``python -m coven_codex run`` with the real Codex, 0.169.0's app-server or 0.47.0's
exec, and the scripted model server) is killed with SIGKILL and restarted again and again. At the end one more
thought per conversation is sent with the daemon left alone, and then:

- every thought reached Codex exactly once: the model's last request of each conversation
  holds that conversation's thoughts, each exactly once, in order; and no thought was the
  newest prompt of two requests (it was never handed to Codex twice);
- every rollout entry reached the journal exactly once: re-translating the rollout of every
  conversation's thread gives exactly the set of egress entry ids found in the journal (besides
  the turn ends the session wrote because the rollout holds none), and no id appears twice; any
  other rollout is a thread Codex began for a thought it died before recording, which holds no
  user message and nothing but its turn's start (:func:`assert_journal_matches_rollouts`);
- every reply is in the right conversation, and no Codex process is left.

With the app-server driver every conversation's thread is on one shared ``codex app-server``;
the ``app-server`` victim kills that process (``kill -9`` of its whole tree) instead of the
daemon, which must report each running turn's failure once, restart it and resume every thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from agent_harness import ROOT, AgentHarness, Daemon, user_prompts

from coven_codex.agent.recovery import user_messages
from coven_codex.entries import BaseEntry
from coven_codex.rollout import TURN_STARTED, RolloutTranslator
from coven_codex.tailing import LineSplitter
from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.processes import codex_processes
from coven_codex.testing.responders import echo_responder

pytestmark = [pytest.mark.codex]

Factory = Callable[[Path, ScriptedModelServer], AgentHarness]
CONVERSATIONS = ("red", "green", "blue")


def translate(path: Path, conversation: str) -> list[BaseEntry]:
    """Every entry the translator makes from one rollout file (ids are deterministic)."""
    thread_id = path.stem[-36:]
    translator = RolloutTranslator(conversation, thread_id)
    entries: list[BaseEntry] = []
    for line in LineSplitter(0).feed(path.read_bytes()):
        entries.extend(translator.feed(line))
    return entries


def shown(entries: list[BaseEntry]) -> str:
    """One line per entry (kind, state, id, the start of its text), for an assertion message."""
    return "".join(f"\n  {e.conversation} {e.kind} {getattr(e, 'state', '')} {e.id} {e.text[:60]!r}" for e in entries)


def assert_journal_matches_rollouts(journal: list[BaseEntry], codex_home: Path) -> None:
    """Every rollout entry of a conversation's thread reached the journal exactly once.

    Re-translating the rollout of every thread a conversation replied from gives exactly the
    egress entry ids found in the journal (besides the turn ends and errors the session wrote
    because the rollout holds none), and no id appears twice. Any other rollout is a thread Codex
    began for a thought it never recorded: a ``codex exec`` that was starting a conversation's
    first thread dies by itself once the killed daemon's end of its stdout is gone (a write to it
    fails), and can die after the rollout's first lines but before the thought's (0.135 writes the
    turn's start and its context first). The daemon had not saved that thread's id and the
    rollout holds no trace of the thought, so recovery sends the thought again, which starts the
    conversation's real thread. Such a rollout must hold no user message and give nothing but its
    turn's start, and none of it may be in the journal: a thought, a reply or an error in a thread
    no conversation owns would be lost.
    """
    ours = [e for e in journal if e.sender == "codex" and e.id and e.id.count(":") == 2]
    counts = Counter(e.id for e in ours)
    assert not [i for i, n in counts.items() if n > 1], "entries appended twice"
    conversation_of = {getattr(e, "thread_id", None) or "": e.conversation for e in journal if e.kind == "response"}
    expected: list[BaseEntry] = []
    for path in sorted((codex_home / "sessions").rglob("rollout-*.jsonl")):
        thread_id = path.stem[-36:]
        if thread_id in conversation_of:
            expected.extend(translate(path, conversation_of[thread_id]))
            continue
        entries = translate(path, "?")
        received = user_messages(path)
        begun = all(e.kind == "status" and getattr(e, "state", None) == TURN_STARTED for e in entries)
        assert received.count == 0 and begun, (
            f"rollout {path.name} is no conversation's thread, yet it holds"
            f" {received.count} user message(s) and these entries:{shown(entries)}"
        )
    expected_ids = {e.id for e in expected}
    # A turn's end (and error) has an id of the turn, whoever writes it: the session writes those the
    # rollout does not hold (0.47 records no turn end), so the journal may hold more of them.
    from_the_session = {i for i in set(counts) - expected_ids if i.split(":")[1].startswith("turn-")}
    written = set(counts) - from_the_session
    missing = [e for e in expected if e.id not in written]
    extra = [e for e in ours if e.id in written - expected_ids]
    assert not missing and not extra, (
        f"journal and rollouts disagree; in a rollout only:{shown(missing[:20])}"
        f"\nin the journal only:{shown(extra[:20])}"
    )


def app_server_leaders(daemon: Daemon) -> list[psutil.Process]:
    """The Codex processes the daemon started itself (the app-server leaders)."""
    with contextlib.suppress(psutil.Error):
        return [p for p in psutil.Process(daemon.pid).children() if p.status() != psutil.STATUS_ZOMBIE]
    return []


def describe(processes: list[psutil.Process]) -> list[str]:
    """Each process's pid, parent, start time and command line, for an assertion message."""
    described = []
    for process in processes:
        with contextlib.suppress(psutil.Error):
            command = " ".join(process.cmdline())[:200]
            described.append(f"{process.pid} ppid={process.ppid()} started={process.create_time():.2f} {command}")
    return described


async def kill9_app_server(daemon: Daemon) -> int:
    """``kill -9`` every process of the shared app-server's tree (not the daemon); how many leaders were hit."""
    leaders = app_server_leaders(daemon)
    for leader in leaders:
        with contextlib.suppress(psutil.Error):
            tree = [leader, *leader.children(recursive=True)]
            for process in tree:
                process.kill()
    return len(leaders)


async def crash_loop(
    h: AgentHarness,
    server: ScriptedModelServer,
    *,
    thoughts: int,
    kills: int,
    seed: int,
    victim: str = "daemon",
    conversations: tuple[str, ...] = CONVERSATIONS,
) -> None:
    rng = random.Random(seed)
    sent: dict[str, list[str]] = {c: [] for c in conversations}

    async def writer() -> None:
        for index in range(thoughts):
            conversation = rng.choice(conversations)
            text = f"{conversation} thought {index}"
            sent[conversation].append(text)
            await h.think(conversation, text)
            await asyncio.sleep(rng.uniform(0.0, 0.25))

    writing = asyncio.create_task(writer())
    started = time.monotonic()
    if victim == "daemon":
        for _ in range(kills):
            daemon = await h.start()
            await asyncio.sleep(rng.uniform(0.2, 2.5))
            await h.kill9(daemon)
    else:
        daemon = await h.start()
        # Until it is ready the daemon's only child may be its capability probe (`codex app-server
        # generate-json-schema`): killed as if it were the app-server, the daemon falls back to exec.
        await h.until_logged("ready (pid")
        hit = 0
        for _ in range(kills):
            await asyncio.sleep(rng.uniform(0.5, 3.0))
            leaders = app_server_leaders(daemon)
            assert len(leaders) <= 1, f"more than one app-server for one CODEX_HOME: {describe(leaders)}"
            hit += await kill9_app_server(daemon)
        # Once the writer is done, a killed app-server is started again only by the next thought.
        assert hit >= kills // 3, f"only {hit} of {kills} kills found an app-server running"
        assert await h.stop(daemon) == 0
    await writing
    daemon = await h.start()
    for conversation in conversations:
        sent[conversation].append(f"{conversation} final")
        await h.think(conversation, f"{conversation} final")
    finals = {f"echo: {c} final" for c in conversations}
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
    for conversation in conversations:
        final = [r for r in requests if user_prompts(r) and user_prompts(r)[-1] == f"{conversation} final"]
        assert len(final) == 1
        history = user_prompts(final[0])
        assert history == sent[conversation], f"history of {conversation} differs:\n{history}\n{sent[conversation]}"

    # -- every rollout entry reached the journal exactly once -------------------------------------
    journal = await h.entries()
    assert_journal_matches_rollouts(journal, h.codex_home)
    for entry in journal:
        if entry.kind == "response":
            assert entry.text.startswith(f"echo: {entry.conversation} "), entry
    for conversation in conversations:  # each conversation kept its one thread: resumed, never replaced
        threads = {
            getattr(e, "thread_id", None) for e in journal if e.kind == "response" and e.conversation == conversation
        }
        assert len(threads) == 1, (conversation, threads)
    assert not codex_processes(h.codex_home)


async def test_kill9_daemon_short(codex_bin_169: Path, harness_factory: Factory) -> None:
    async with ScriptedModelServer(responder=echo_responder) as server:
        h = harness_factory(codex_bin_169, server)
        await crash_loop(h, server, thoughts=30, kills=5, seed=7)


@pytest.mark.parametrize("version", ["0.135.0", "0.147.0"])
async def test_kill9_daemon_short_releases_between(
    version: str, codex_of: Callable[[str], Path], harness_factory: Factory
) -> None:
    """The CI's releases between 0.47 and 0.169 (tests/agent/test_version_matrix.py): 0.135 on exec
    with a rollout that records turn starts and ends, 0.147 on the app-server with the thought ids
    on ``user_message`` (what a thought in flight at the kill is resolved by)."""
    async with ScriptedModelServer(responder=echo_responder) as server:
        h = harness_factory(codex_of(version), server)
        await crash_loop(h, server, thoughts=30, kills=5, seed=135)


BEGUN_NOT_RECORDED = ROOT / "tests" / "fixtures" / "recovery" / "exec_0.135_killed_before_the_first_user_message.jsonl"
"""The real rollout (instruction texts and paths shortened) of issue 9's failure of
``test_kill9_daemon_short_releases_between[0.135.0]``: a ``codex exec`` starting a conversation's
first thread wrote the thread's meta, its turn's start, the developer instructions and the
environment context, then died with the killed daemon before it recorded the thought."""


def plant(rollout: Path, codex_home: Path) -> Path:
    """Copy ``rollout`` into ``codex_home``'s sessions, where Codex keeps its threads; its new path."""
    day = codex_home / "sessions" / "2026" / "11" / "24"
    day.mkdir(parents=True, exist_ok=True)
    planted = day / f"rollout-2026-11-24T01-17-45-{thread_of(rollout)}.jsonl"
    planted.write_bytes(rollout.read_bytes())
    return planted


def thread_of(rollout: Path) -> str:
    """The thread id a rollout's ``session_meta`` names."""
    meta = json.loads(rollout.read_text().splitlines()[0])
    return str(meta["payload"]["id"])


def test_a_thread_begun_for_a_thought_it_never_recorded_is_no_conversations(tmp_path: Path) -> None:
    """Issue 9: the crash test counted such a thread's turn start as an entry the journal lacked."""
    planted = plant(BEGUN_NOT_RECORDED, tmp_path)
    assert user_messages(planted).count == 0
    assert [getattr(e, "state", None) for e in translate(planted, "?")] == [TURN_STARTED]
    assert_journal_matches_rollouts([], tmp_path)


def test_a_rollout_of_no_conversation_that_holds_a_thought_or_a_reply_fails_the_check(tmp_path: Path) -> None:
    """What the crash test allows a thread no conversation owns is that much and no more."""
    planted = plant(BEGUN_NOT_RECORDED, tmp_path)
    thought = {
        "type": "response_item",
        "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "red thought 0"}]},
    }
    with planted.open("a") as rollout:
        rollout.write(json.dumps(thought) + "\n")
    with pytest.raises(AssertionError, match="holds 1 user message"):
        assert_journal_matches_rollouts([], tmp_path)
    planted.write_bytes(BEGUN_NOT_RECORDED.read_bytes())
    reply = {"type": "event_msg", "payload": {"type": "agent_message", "message": "echo: red thought 0"}}
    with planted.open("a") as rollout:
        rollout.write(json.dumps(reply) + "\n")
    with pytest.raises(AssertionError, match="echo: red thought 0"):
        assert_journal_matches_rollouts([], tmp_path)


async def test_a_thread_begun_for_a_thought_it_never_recorded_is_left_alone(
    codex_of: Callable[[str], Path], harness_factory: Factory
) -> None:
    """Issue 9, deterministic: the rollout that failed ``test_kill9_daemon_short_releases_between[0.135.0]``
    lies in ``CODEX_HOME`` when the daemon (0.135 on exec) starts. No conversation takes its thread,
    every conversation's thoughts reach the model once in a thread of its own, and the crash
    test's check of the journal against the rollouts passes (it failed on that thread before)."""
    async with ScriptedModelServer(responder=echo_responder) as server:
        h = harness_factory(codex_of("0.135.0"), server)
        planted = plant(BEGUN_NOT_RECORDED, h.codex_home)
        daemon = await h.start()
        for conversation in CONVERSATIONS:
            await h.think(conversation, f"{conversation} thought 0")
        replied = {f"echo: {c} thought 0" for c in CONVERSATIONS}
        await h.wait_for(
            lambda es: replied <= {e.text for e in es if e.kind == "response"}, timeout=120, what="the replies"
        )
        assert await h.stop(daemon) == 0
        prompts = [user_prompts(r) for r in server.requests.responses_requests()]
    assert sorted(prompts) == [[f"{c} thought 0"] for c in sorted(CONVERSATIONS)]
    journal = await h.entries()
    threads = {getattr(e, "thread_id", None) for e in journal if e.kind == "response"}
    assert len(threads) == len(CONVERSATIONS)
    assert thread_of(planted) not in threads
    assert planted.read_bytes() == BEGUN_NOT_RECORDED.read_bytes()  # never resumed
    assert_journal_matches_rollouts(journal, h.codex_home)


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


MANY = tuple(f"c{n}" for n in range(8))


async def test_kill9_shared_app_server_mid_turn_many_conversations(
    codex_bin_169: Path, harness_factory: Factory
) -> None:
    """Eight conversations on one app-server, killed six times mid-flow: every thought once, no orphan."""
    async with ScriptedModelServer(responder=echo_responder) as server:
        h = harness_factory(codex_bin_169, server)
        await crash_loop(h, server, thoughts=48, kills=6, seed=12, victim="app-server", conversations=MANY)


async def test_kill9_shared_app_server_with_threads_let_go_at_once(
    codex_bin_169: Path, harness_factory: Factory
) -> None:
    """Issue 12: every conversation lets its thread go as soon as its turn is over
    (``release_thread_after = 0``) and the pool keeps the process warm, so most thoughts resume their
    thread on it; the app-server, warm or serving, killed mid-flow: every thought once, no orphan."""
    async with ScriptedModelServer(responder=echo_responder) as server:
        h = harness_factory(codex_bin_169, server)
        h.extra_args = ["--release-thread-after", "0"]
        await crash_loop(h, server, thoughts=40, kills=5, seed=1200, victim="app-server", conversations=MANY)


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_kill9_shared_app_server_200_thoughts_15_kills(codex_bin_169: Path, harness_factory: Factory) -> None:
    async with ScriptedModelServer(responder=echo_responder) as server:
        h = harness_factory(codex_bin_169, server)
        await crash_loop(h, server, thoughts=200, kills=15, seed=1212, victim="app-server", conversations=MANY)


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_kill9_daemon_many_conversations_on_one_app_server(codex_bin_169: Path, harness_factory: Factory) -> None:
    async with ScriptedModelServer(responder=echo_responder) as server:
        h = harness_factory(codex_bin_169, server)
        await crash_loop(h, server, thoughts=120, kills=15, seed=88, conversations=MANY)


MORE = tuple(f"m{n}" for n in range(40))


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_kill9_daemon_40_conversations_on_one_app_server(codex_bin_169: Path, harness_factory: Factory) -> None:
    """40 conversations (five times ``max_sessions``, so idle ones are evicted for waiting ones all
    along) on one shared app-server, the daemon killed at random moments: every thought once, in
    order, no orphan."""
    async with ScriptedModelServer(responder=echo_responder) as server:
        h = harness_factory(codex_bin_169, server)
        await crash_loop(h, server, thoughts=160, kills=12, seed=4040, conversations=MORE)


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_kill9_shared_app_server_40_conversations(codex_bin_169: Path, harness_factory: Factory) -> None:
    """The same 40 conversations, the shared app-server (not the daemon) killed at random moments."""
    async with ScriptedModelServer(responder=echo_responder) as server:
        h = harness_factory(codex_bin_169, server)
        await crash_loop(h, server, thoughts=160, kills=12, seed=4141, victim="app-server", conversations=MORE)
