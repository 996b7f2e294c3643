"""Start-up recovery reads only what a restart may repeat, not the journal's length (issue 18, items 1-2).

The daemon (a real process, Codex 0.169.0, the scripted model server) keeps a *replay window* per
conversation (``coven_codex/agent/replay.py``): a conversation that is idle when the daemon stops
has none, so however much the journal grew since, start-up reads it only from the ingress cursor
(and keeps only the ids found there); a conversation whose turn a ``kill -9`` cut short has one,
which the next run reads from, then closes once egress has passed the rollout.
"""

from __future__ import annotations

import asyncio
import contextlib
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
from coven_codex.entries import BaseEntry, GenericEntry, ResponseEntry, ThoughtEntry
from coven_codex.journal import FileJournal, JournalRecord, Position
from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.steps import Reply, Stall

pytestmark = [pytest.mark.codex, pytest.mark.timeout(300)]

Factory = Callable[[Path, ScriptedModelServer], AgentHarness]
RECOVERY = re.compile(r"recovery: read the journal from (\S+) \((\d+) entr")
TRAFFIC_BYTES = 40_000_000


async def add_traffic(h: AgentHarness) -> Position:
    """The journal grows by other conversations' traffic, which a running daemon read (its cursor
    is saved past it): :data:`TRAFFIC_BYTES` of daemon entries of other turns. The journal's end."""
    template = ResponseEntry(id="I" * 24, conversation="other", text="x" * 150).to_json().encode() + b"\n"
    lines = [template.replace(b"I" * 24, b"other-thread:%09d:0" % n) for n in range(TRAFFIC_BYTES // len(template))]
    with h.journal_path.open("ab") as journal:
        journal.write(b"".join(lines))
    end = await h.journal.end_position()
    await h.journal.save_cursor(CURSOR_NAME, end)
    return end


def assert_start_up_skipped_the_traffic(pid: int) -> None:
    """The daemon ``pid`` read less than the traffic: its start-up did not read the journal from before it."""
    read = bytes_read(pid)
    assert read < TRAFFIC_BYTES, f"the daemon read {read:,} bytes, the traffic alone is {TRAFFIC_BYTES:,}"


async def reply_after(h: AgentHarness, position: Position, conversation: str, text: str) -> None:
    """Wait (at most 60 s) for a reply ``text`` in ``conversation`` after ``position``, on the
    journal's tail (the traffic before it is read once, not again at every look)."""

    wanted = ("response", conversation, text)

    async def replied() -> None:
        assert isinstance(h.journal, FileJournal)
        async with contextlib.aclosing(h.journal.tail(position)) as items:
            async for item in items:
                entry = item.entry if isinstance(item, JournalRecord) else None
                if entry is not None and (entry.kind, entry.conversation, entry.text) == wanted:
                    return

    try:
        await asyncio.wait_for(replied(), 60)
    except TimeoutError:
        raise AssertionError(f"no reply {text!r} in {conversation!r}") from None


def bytes_read(pid: int) -> int:
    """Bytes the process has read so far, from files or otherwise (``rchar``)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/<pid>/io")


def saved_state(h: AgentHarness, conversation: str) -> dict[str, object]:
    """The newest state ``conversation``'s log holds on disk."""
    lines = (h.sessions_dir() / state_file_name(conversation)).read_bytes().splitlines()
    state = json.loads(lines[-1])
    assert isinstance(state, dict)
    return state


async def until_closed(h: AgentHarness, conversation: str) -> None:
    """Wait (at most 30 s) until ``conversation``'s saved state has no replay window."""
    deadline = time.monotonic() + 30
    while saved_state(h, conversation).get("replay_from") is not None:
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
    end = await add_traffic(h)

    daemon = await h.start()
    await h.think("idle", "again")
    await reply_after(h, end, "idle", "echo: again")
    # Start-up did not read the traffic (the idle conversation's old turn lies before it).
    assert_start_up_skipped_the_traffic(daemon.pid)
    start, found = await recovery_of(h)
    assert (start, found) == (str(end), 0)
    assert await h.stop(daemon) == 0
    assert_each_id_once([item.entry for item in await h.journal.read() if isinstance(item, JournalRecord)])
    assert saved_state(h, "idle").get("replay_from") is None


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
        # The warm-up turn's window closes once egress has passed its end; a thought arriving
        # before that (a loaded machine) extends the same window, which then rightly starts at the
        # warm-up turn.
        await until_closed(h, "busy")
        before = await h.journal.end_position()
        await h.think("busy", "slow one")
        # The turn is under way in the journal: its start and its user message, entries of
        # rollout lines, are written; Codex now waits on the stalled model.
        await h.wait_for(lambda es: len(states(es, "turn_started")) == 2, what="the slow turn's start")
        await h.kill9(daemon)
        assert saved_state(h, "busy").get("replay_from") is not None

        daemon = await h.start()
        start, found = await recovery_of(h)
        # The cut turn's entries, read again from its window, not the warm-up turn's before it.
        after = [i for i in await h.journal.read(before) if isinstance(i, JournalRecord) and i.entry.sender == "codex"]
        assert 0 < found <= len(after), (start, found, len(after))
        await h.think("busy", "after the crash")
        await h.wait_for(lambda es: "echo: after the crash" in replies(es, "busy"), what="the reply after the crash")
        await h.wait_for(lambda es: len(states(es, "turn_completed")) == 2, what="the last turn's end")
        assert await h.stop(daemon) == 0
        assert_each_id_once(await h.entries())
        assert saved_state(h, "busy").get("replay_from") is None  # ... and closed once egress passed it

        end = await add_traffic(h)
        daemon = await h.start()
        await h.think("busy", "last")
        await reply_after(h, end, "busy", "echo: last")
        assert_start_up_skipped_the_traffic(daemon.pid)
        start, found = await recovery_of(h)
        assert (start, found) == (str(end), 0)
        assert await h.stop(daemon) == 0


def peak_rss(pid: int) -> int:
    """The process's resident high-water mark (``VmHWM``), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/<pid>/status")


BACKLOG_RSS_LIMIT = 100_000_000
"""Issue 26 item 9's bound on the daemon's memory after a backlog (the daemon alone takes about 50 MB)."""


def write_backlog(h: AgentHarness) -> int:
    """Other programs' traffic appended while the daemon is stopped, its cursor left before it:
    :data:`TRAFFIC_BYTES` of chat messages and another bot's replies (nothing for Codex), with two
    thoughts for Codex in the middle, one as coven-codex writes entries and one as another program
    might (spaces, its kind spelled with a ``\\u`` escape). The bytes written."""
    message = GenericEntry(id="M" * 16, kind="message", conversation="C" * 10, sender="slack:U1", text="m" * 90)
    answer = ResponseEntry(id="A" * 16, conversation="C" * 10, sender="other-bot", text="a" * 90, in_reply_to="M" * 16)
    templates = [message.to_json().encode() + b"\n", answer.to_json().encode() + b"\n"]
    count = TRAFFIC_BYTES // sum(len(t) for t in templates)
    lines = [
        t.replace(b"M" * 16, b"msg-%012d" % n)
        .replace(b"A" * 16, b"ans-%012d" % n)
        .replace(b"C" * 10, b"room-%05d" % (n % 500))
        for n in range(count)
        for t in templates
    ]
    plain = ThoughtEntry(id="backlog-a", conversation="queued-a", sender="web", text="first").to_json().encode()
    odd = b'{"id": "backlog-b", "kind": "\\u0074hought", "conversation": "queued-b", "text": "second"}'
    lines.insert(len(lines) // 3, plain + b"\n")
    lines.insert(2 * len(lines) // 3, odd + b"\n")
    data = b"".join(lines)
    with h.journal_path.open("ab") as journal:
        journal.write(data)
    return len(data)


async def test_a_backlog_written_while_stopped_is_read_once_and_not_held(
    codex_bin_169: Path, model_server: ScriptedModelServer, harness_factory: Factory
) -> None:
    h = harness_factory(codex_bin_169, model_server)
    daemon = await h.start()
    await h.think("idle", "hello")
    await h.wait_for(lambda es: replies(es, "idle") == ["echo: hello"], what="the first reply")
    assert await h.stop(daemon) == 0
    cursor = await h.journal.load_cursor(CURSOR_NAME)
    end = await h.journal.end_position()
    written = write_backlog(h)

    daemon = await h.start()
    await h.think("new", "after the backlog")
    await reply_after(h, end, "new", "echo: after the backlog")
    await reply_after(h, end, "queued-a", "echo: first")
    await reply_after(h, end, "queued-b", "echo: second")
    # One pass: start-up and ingress together read the backlog once (today's code read it twice).
    read = bytes_read(daemon.pid)
    assert read < 1.5 * written, f"the daemon read {read:,} bytes for a backlog of {written:,}"
    # Memory bounded by a window of the file, not by the backlog (today's held every line decoded).
    peak = peak_rss(daemon.pid)
    assert peak < BACKLOG_RSS_LIMIT, f"peak RSS {peak:,} bytes after a backlog of {written:,}"
    start, _ours = await recovery_of(h)
    assert start == str(cursor)
    assert await h.stop(daemon) == 0
    entries = [item.entry for item in await h.journal.read() if isinstance(item, JournalRecord)]
    assert_each_id_once(entries)
    for conversation, text in (
        ("queued-a", "echo: first"),
        ("queued-b", "echo: second"),
        ("new", "echo: after the backlog"),
    ):
        assert replies(entries, conversation) == [text], conversation
