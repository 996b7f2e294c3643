"""The adapter contract, written once, that every adapter passes (see ``adapters_under_test.py``).

The tests play the daemon's part by appending entries to the journal themselves, and a user's
by typing and pressing through the adapter under test; what the user sees is read on the
platform's side.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from adapters_under_test import AdapterUnderTest, ConsoleAdapter, FakeAdapter, Shown
from bad_day import HTML_502, Fault, Faults
from discord_under_test import DiscordAdapter
from running import append, close, running
from slack_under_test import SlackAdapter
from telegram_under_test import TelegramAdapter
from web_under_test import WebAdapter

from coven_codex.entries import (
    ApprovalEntry,
    ApprovalRequestEntry,
    BaseEntry,
    CancelEntry,
    DeltaEntry,
    ErrorEntry,
    ResetEntry,
    ResponseEntry,
    StatusEntry,
    ThoughtEntry,
    ToolCallEntry,
    ToolResultEntry,
)
from coven_codex.journal import FileJournal, JournalRecord

ADAPTERS: dict[str, Callable[[Path], AdapterUnderTest]] = {
    "fake": FakeAdapter,
    "console": ConsoleAdapter,
    "web": WebAdapter,
    "discord": DiscordAdapter,
    "slack": SlackAdapter,
    "telegram": TelegramAdapter,
}
NETWORK = [name for name in ADAPTERS if ADAPTERS[name](Path("/nonexistent")).network]
CRASH_SAFE: dict[str, Callable[[Path], AdapterUnderTest]] = {
    # Adapters that must never repeat or lose a message across kill -9; each may also kill itself
    # at its own critical points (here: right after the platform recorded a post or an edit).
    "fake": lambda folder: FakeAdapter(folder, rate_limit_every=7, chaos=0.03),
    "web": WebAdapter,
    "discord": lambda folder: DiscordAdapter(folder, rate_limit_every=7),
    # the fake Slack answers every 7th post or edit with 429 (Retry-After: 0) and kills the adapter
    # right after recording 3% of its posts and edits, before the answer reaches it
    "slack": lambda folder: SlackAdapter(folder, chaos=0.03, rate_limit_every=7),
    # the fake Bot API answers every 7th write with 429 (retry_after 1) and kills the adapter right
    # after creating or editing 3% of messages; Telegram may repeat a message in flight at a kill
    "telegram": lambda folder: TelegramAdapter(folder, chaos=0.03, rate_limit_every=7),
}


RATE_LIMITED: dict[str, Callable[[Path], AdapterUnderTest]] = {
    # Adapters whose platform answers HTTP 429: the fake every second call, the fake Slack 5 in a row (Retry-After: 1)
    "fake": lambda folder: FakeAdapter(folder, rate_limit_every=2),
    "slack": lambda folder: SlackAdapter(folder, burst=5),
    "telegram": lambda folder: TelegramAdapter(folder, rate_limit_every=2),
}


async def _running(kind: str, tmp_path: Path) -> AsyncIterator[AdapterUnderTest]:
    async with running(ADAPTERS[kind](tmp_path)) as adapter:
        yield adapter


@pytest.fixture(params=list(ADAPTERS))
async def adapter(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AdapterUnderTest]:
    async for started in _running(request.param, tmp_path):
        yield started


@pytest.fixture(params=NETWORK)
async def network_adapter(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AdapterUnderTest]:
    async for started in _running(request.param, tmp_path):
        yield started


async def _journal_entries(path: Path) -> list[BaseEntry]:
    journal = FileJournal(path)
    try:
        return [item.entry for item in await journal.read() if isinstance(item, JournalRecord)]
    finally:
        await journal.aclose()


async def _until(what: str, check: Callable[[], Awaitable[bool]], timeout: float = 20) -> None:
    try:
        async with asyncio.timeout(timeout):
            while not await check():
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"never happened within {timeout} s: {what}") from None


async def _shown(adapter: AdapterUnderTest, text: str) -> list[Shown]:
    return [message for message in await adapter.messages() if text in message.text]


async def _appended(adapter: AdapterUnderTest, kind: type[BaseEntry]) -> list[BaseEntry]:
    return [entry for entry in await _journal_entries(adapter.journal) if isinstance(entry, kind)]


async def test_mapping_routes_both_ways_and_is_stable_across_restarts(adapter: AdapterUnderTest) -> None:
    conversation = adapter.conversation("general", "ann")
    await adapter.say("general", "ann", "hello codex")
    await _until("the thought in the journal", lambda: _has_thought(adapter, "hello codex", conversation))
    await append(
        adapter.journal,
        ResponseEntry(text="reply for general", conversation=conversation),
        ResponseEntry(text="reply for elsewhere", conversation="someone-else"),
    )
    await _until("the reply shown", lambda: _visible(adapter, "reply for general"))
    await append(adapter.journal, ResponseEntry(text="marker after", conversation=conversation))
    await _until("the marker shown", lambda: _visible(adapter, "marker after"))
    assert not await _shown(adapter, "reply for elsewhere")
    assert all(m.channel == "general" for m in await _shown(adapter, "reply for general"))

    await adapter.stop()
    await adapter.start()
    await adapter.say("general", "ann", "again after restart")
    await _until("the second thought", lambda: _has_thought(adapter, "again after restart", conversation))


async def _has_thought(adapter: AdapterUnderTest, text: str, conversation: str) -> bool:
    return any(e.text == text and e.conversation == conversation for e in await _appended(adapter, ThoughtEntry))


async def _visible(adapter: AdapterUnderTest, text: str) -> bool:
    return bool(await _shown(adapter, text))


async def test_a_stranger_is_refused_and_nothing_reaches_the_journal(network_adapter: AdapterUnderTest) -> None:
    adapter = network_adapter
    await adapter.say("general", "stranger", "let me in")
    await _until("the refusal", lambda: _visible(adapter, "not allowed"))
    await adapter.say("general", "bob", "/new")
    await _until("the admin-only refusal", lambda: _visible(adapter, "Only an admin"))
    await adapter.say("general", "bob", "bob's message")
    await _until(
        "bob's thought", lambda: _has_thought(adapter, "bob's message", adapter.conversation("general", "bob"))
    )
    entries = await _journal_entries(adapter.journal)
    assert not [e for e in entries if e.sender == "stranger" or "let me in" in e.text]
    assert not [e for e in entries if isinstance(e, ResetEntry)]


async def test_a_long_reply_is_split_without_losing_or_repeating_a_line(adapter: AdapterUnderTest) -> None:
    conversation = adapter.conversation("general", "ann")
    code = "\n".join(f"code line {n:03}" for n in range(80))
    text = "Here is the code:\n\n```python\n" + code + "\n```\n\n" + " ".join(f"word{n:03}" for n in range(150))
    await append(
        adapter.journal,
        ResponseEntry(text=text, conversation=conversation),
        ResponseEntry(text="the end marker", conversation=conversation),
    )
    await _until("the end marker", lambda: _visible(adapter, "the end marker"))
    messages = await adapter.messages()
    joined = "\n".join(m.text for m in messages)
    for n in range(80):
        assert joined.count(f"code line {n:03}") == 1, n
    for n in range(150):
        assert joined.count(f"word{n:03}") == 1, n
    if adapter.limit is not None:
        parts = [m for m in messages if "code line" in m.text or "word" in m.text]
        assert len(parts) > 1 and all(len(m.text) <= adapter.limit for m in parts)
        assert all(m.text.count("```") % 2 == 0 for m in parts), [m.text for m in parts]


async def test_a_streamed_reply_shows_its_text_once(adapter: AdapterUnderTest) -> None:
    conversation = adapter.conversation("general", "ann")
    await append(adapter.journal, StatusEntry(state="turn_started", conversation=conversation))
    for chunk in ("The ans", "wer is ", "forty-"):
        await append(adapter.journal, DeltaEntry(text=chunk, item_id="item-1", conversation=conversation))
        await asyncio.sleep(0.1)
    await _until("the streamed text", lambda: _visible(adapter, "The ans"))
    await append(
        adapter.journal,
        DeltaEntry(text="two.", item_id="item-1", conversation=conversation),
        ResponseEntry(text="The answer is forty-two.", conversation=conversation),
        StatusEntry(state="turn_completed", conversation=conversation),
    )
    await _until("the final reply", lambda: _final_visible(adapter, "The answer is forty-two."))
    await append(adapter.journal, ResponseEntry(text="after the stream", conversation=conversation))
    await _until("the marker", lambda: _visible(adapter, "after the stream"))
    assert len(await _shown(adapter, "forty-two")) == 1
    assert len(await _shown(adapter, "The ans")) == 1


async def _restarted_until(adapter: AdapterUnderTest, text: str) -> bool:
    """Whether ``text`` is shown; restarts the adapter when it killed itself."""
    if not adapter.alive():
        await adapter.start()
    return await _visible(adapter, text)


async def _final_visible(adapter: AdapterUnderTest, text: str) -> bool:
    return any(m.final for m in await _shown(adapter, text))


async def test_tools_errors_and_approvals_are_shown_and_answered(adapter: AdapterUnderTest) -> None:
    conversation = adapter.conversation("general", "ann")
    await append(
        adapter.journal,
        ToolCallEntry(tool="coven.add", arguments={"a": 2, "b": 3}, call_id="c1", conversation=conversation),
        ToolResultEntry(text="5", tool="coven.add", call_id="c1", conversation=conversation),
        ToolResultEntry(text="boom", tool="coven.div", is_error=True, call_id="c2", conversation=conversation),
        ErrorEntry(text="429 Too Many Requests", code="RATE_LIMIT", hint="wait a minute", conversation=conversation),
        ApprovalRequestEntry(request_id="req-7", action="run rm -rf build", conversation=conversation),
    )
    await _until("the approval request", lambda: _visible(adapter, "req-7"))
    assert await _shown(adapter, "→ coven.add(a=2, b=3)") and await _shown(adapter, "← 5")
    assert await _shown(adapter, "✗ coven.div: boom")
    assert await _shown(adapter, "wait a minute")
    request = (await _shown(adapter, "req-7"))[0]
    assert "approve req-7" in request.actions and "deny req-7" in request.actions
    await adapter.press("general", "ann", "approve req-7")
    await _until("the approval", lambda: _has(adapter, ApprovalEntry))
    answer = (await _appended(adapter, ApprovalEntry))[0]
    assert isinstance(answer, ApprovalEntry) and (answer.request_id, answer.decision) == ("req-7", "approve")
    assert answer.conversation == conversation


async def _has(adapter: AdapterUnderTest, kind: type[BaseEntry], count: int = 1) -> bool:
    return len(await _appended(adapter, kind)) >= count


async def test_cancel_and_new_session_commands(adapter: AdapterUnderTest) -> None:
    conversation = adapter.conversation("general", "ann")
    await adapter.say("general", "ann", "/cancel")
    await _until("the cancel", lambda: _has(adapter, CancelEntry))
    await adapter.press("general", "ann", "cancel")
    await _until("the second cancel", lambda: _has(adapter, CancelEntry, 2))
    await adapter.say("general", "ann", "/new")
    await _until("the reset", lambda: _has(adapter, ResetEntry))
    await adapter.say("general", "ann", "/status")
    await _until("the status", lambda: _visible(adapter, "queued messages"))
    entries = await _journal_entries(adapter.journal)
    assert {e.conversation for e in entries if isinstance(e, CancelEntry | ResetEntry)} == {conversation}
    assert not [e for e in entries if isinstance(e, ThoughtEntry)]  # commands are not thoughts


THREAD_1 = "0199a0b0-1111-7000-8000-000000000001"
THREAD_2 = "0199a0b0-2222-7000-8000-000000000002"


async def test_resume_lists_the_users_earlier_threads_and_takes_one_over(adapter: AdapterUnderTest) -> None:
    """``/resume`` lists the threads of conversations the user took part in (not this conversation's
    own), newest first; ``/resume THREAD`` appends the ``reset`` that takes it over."""
    conversation = adapter.conversation("general", "bob")
    await adapter.say("general", "bob", "bob was here")
    await _until("bob's thought", lambda: _has_thought(adapter, "bob was here", conversation))
    await append(
        adapter.journal,
        StatusEntry(state="session_started", thread_id=THREAD_1, conversation=conversation),
        StatusEntry(state="session_reset", thread_id=THREAD_1, conversation=conversation),
        StatusEntry(state="session_started", thread_id=THREAD_2, conversation=conversation),
    )
    await adapter.say("general", "bob", "/resume")
    await _until("the list", lambda: _visible(adapter, "threads you can continue"))
    await _until("the listed thread", lambda: _visible(adapter, f"{THREAD_1}  {conversation}"))
    # (one message, or a line each on the console; the conversation's current thread is not offered)
    assert not await _shown(adapter, f"{THREAD_2}  {conversation}")
    await adapter.say("general", "bob", f"/resume {THREAD_1[:13]}")
    await _until("the take-over", lambda: _has(adapter, ResetEntry))
    (reset,) = await _appended(adapter, ResetEntry)
    assert isinstance(reset, ResetEntry) and reset.resume_thread == THREAD_1 and reset.conversation == conversation
    await _until("the answer", lambda: _visible(adapter, f"takes over Codex thread {THREAD_1}"))


async def test_a_user_cannot_resume_a_thread_of_a_conversation_they_never_took_part_in(
    network_adapter: AdapterUnderTest,
) -> None:
    """Attack: bob (allowed, not an admin) names a thread of a conversation he never wrote in (whose
    thought even carries his display name as its sender): refused like an unknown thread, the thread
    not listed, nothing appended."""
    adapter = network_adapter
    await append(
        adapter.journal,
        ThoughtEntry(conversation="ann-private", sender="bob", text="ann's secret plan"),
        StatusEntry(state="session_started", thread_id=THREAD_1, conversation="ann-private"),
    )
    await adapter.say("general", "bob", f"/resume {THREAD_1}")
    await _until("the refusal", lambda: _visible(adapter, f"no Codex thread '{THREAD_1}' you took part in"))
    await adapter.say("general", "bob", "/resume ann-private")
    await _until("the second refusal", lambda: _visible(adapter, "no Codex thread 'ann-private' you took part in"))
    await adapter.say("general", "bob", "/resume")
    await _until("the empty list", lambda: _visible(adapter, "no earlier Codex thread you took part in"))
    assert not await _shown(adapter, "secret plan")
    assert not await _appended(adapter, ResetEntry)


async def test_an_image_comes_in_as_an_attachment(adapter: AdapterUnderTest, tmp_path: Path) -> None:
    image = tmp_path / "cat.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\n")
    url = image.as_uri()
    await adapter.say(
        "general", "ann", "what is in this picture?", ({"url": url, "media_type": "image/png", "name": "cat.png"},)
    )
    await _until("the thought", lambda: _has(adapter, ThoughtEntry))
    thought = (await _appended(adapter, ThoughtEntry))[0]
    assert isinstance(thought, ThoughtEntry)
    assert thought.text == "what is in this picture?"
    # The adapter may pass the file on or store its own copy (the web page does): same bytes either way.
    assert len(thought.attachments) == 1 and thought.attachments[0].media_type == "image/png"
    got = thought.attachments[0].url
    assert got == url or Path(got.removeprefix("file://")).read_bytes() == image.read_bytes()


@pytest.mark.parametrize("kind", list(RATE_LIMITED))
async def test_a_burst_of_429s_drops_nothing(kind: str, tmp_path: Path) -> None:
    adapter = RATE_LIMITED[kind](tmp_path)
    conversation = adapter.conversation("general", "ann")
    await adapter.start()
    try:
        await append(
            adapter.journal, *(ResponseEntry(text=f"burst reply {n:02}.", conversation=conversation) for n in range(30))
        )
        await _until("the last reply", lambda: _visible(adapter, "burst reply 29."), timeout=60)
    finally:
        await close(adapter)
    screen = "\n".join(message.text for message in await adapter.messages())
    assert [screen.count(f"burst reply {n:02}.") for n in range(30)] == [1] * 30
    assert [screen.index(f"burst reply {n:02}.") for n in range(30)] == sorted(
        screen.index(f"burst reply {n:02}.") for n in range(30)
    )


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(CRASH_SAFE))
async def test_kill_9_at_random_points_never_duplicates_or_loses_a_message(kind: str, tmp_path: Path) -> None:
    """200 entries (replies, streamed replies, tool calls, long replies) flow while the adapter is killed."""
    adapter = CRASH_SAFE[kind](tmp_path)
    conversation = adapter.conversation("general", "ann")
    rng = random.Random(20261123)
    markers: list[str] = []  # each must be shown exactly once
    entries: list[BaseEntry] = []
    while len(entries) < 200:
        n = len(entries)
        roll = rng.random()
        if roll < 0.15:
            text = f"streamed reply {n:03}. " + "x" * rng.randrange(0, 40)
            pieces = [text[i : i + 7] for i in range(0, len(text), 7)]
            entries += [DeltaEntry(text=p, item_id=f"item-{n}", conversation=conversation) for p in pieces]
            entries.append(ResponseEntry(text=text, conversation=conversation))
            markers.append(f"streamed reply {n:03}.")
        elif roll < 0.25:
            words = [f"w{n:03}.{i:03}" for i in range(120)]
            entries.append(ResponseEntry(text=f"long reply {n:03}. " + " ".join(words), conversation=conversation))
            markers += [f"long reply {n:03}.", *words]
        elif roll < 0.4:
            entries.append(ToolCallEntry(tool=f"tool{n:03}", arguments={"n": n}, conversation=conversation))
            markers.append(f"tool{n:03}(")
        else:
            entries.append(ResponseEntry(text=f"plain reply {n:03}.", conversation=conversation))
            markers.append(f"plain reply {n:03}.")

    async def feed() -> None:
        journal = FileJournal(adapter.journal, durability="never")
        try:
            for entry in entries:
                await journal.append(entry)
                await asyncio.sleep(rng.uniform(0, 0.05))
        finally:
            await journal.aclose()

    await adapter.start()
    feeder = asyncio.create_task(feed())
    kills = 0
    try:
        while not feeder.done() or kills < 12:
            await asyncio.sleep(rng.uniform(0.05, 0.4))
            await adapter.kill()
            kills += 1
            await adapter.start()
        await feeder
        await _until("the last message", lambda: _restarted_until(adapter, markers[-1]), timeout=90)
        await asyncio.sleep(1)
    finally:
        await close(adapter)
    screen = "\n".join(message.text for message in await adapter.messages())
    counts = {marker: screen.count(marker) for marker in markers}
    duplicated = {marker: count for marker, count in counts.items() if count > 1}
    missing = [marker for marker, count in counts.items() if count == 0]
    assert not missing, (kills, missing)
    _assert_no_repeats_but_documented(adapter, markers, duplicated, kills)
    assert kills >= 12


def _assert_no_repeats_but_documented(
    adapter: AdapterUnderTest, markers: list[str], duplicated: dict[str, int], kills: int
) -> None:
    """No repeats; on a platform that cannot tell whether a message was sent (Telegram), at most one
    per kill and per answer a cut connection lost, each of a message in flight then (docs/adapters.md)."""
    repeats = getattr(adapter, "repeats", None)
    if repeats is None:
        assert not duplicated, (kills, duplicated)
        return
    extra, allowed, unexplained = repeats(markers)
    print(f"{adapter.name}: {extra} repeated message(s); at most {allowed} allowed (kills and lost answers)")
    assert kills <= allowed and extra <= allowed and not unexplained, (extra, allowed, unexplained)


@dataclass(frozen=True)
class BadDay:
    """An adapter under the bad-day contract, and how its platform (or the browser) answers badly."""

    adapter: AdapterUnderTest
    process: Callable[[], asyncio.subprocess.Process | None]
    misbehave: Callable[[random.Random], Awaitable[None]]
    """Make one bad answer (or moment) happen from now on."""
    bad_answers: Callable[[], int]
    """How many bad answers (or moments) there have been."""
    pending: Callable[[], bool]
    """Whether a bad answer made has yet to meet a request (a moment, to happen)."""
    refusal: Callable[[str], Fault] | None = None
    """A refusal of every entry carrying a text; None: the platform never refuses an entry (the page)."""
    faults: Faults | None = None
    per_round: int = 1
    """Bad answers (moments) made per round of the test's loop: 1 to 3 times this."""


def _faulty(
    adapter: SlackAdapter | DiscordAdapter | TelegramAdapter,
    faults: Faults,
    route: str,
    refusal: Callable[[str], Fault],
) -> BadDay:
    """A fake platform answering badly at random (``_random_fault``) on ``route`` (Slack, Telegram: their
    write methods)."""

    async def misbehave(rng: random.Random) -> None:
        faults.add(_random_fault(rng, route, adapter.name))

    def random_faults() -> list[Fault]:
        return [f for f in faults.active if f.text == ""]

    def bad_answers() -> int:
        return sum(f.hits for f in random_faults())

    def pending() -> bool:
        return any(f.times is None or f.hits < f.times for f in random_faults())

    return BadDay(adapter, lambda: adapter.process, misbehave, bad_answers, pending, refusal, faults)


def _slack_bad_day(folder: Path) -> BadDay:
    adapter = SlackAdapter(folder, chaos=0.02)

    def refusal(text: str) -> Fault:
        return Fault(status=200, body={"ok": False, "error": "invalid_blocks"}, text=text, times=None)

    return _faulty(adapter, adapter.fake.faults, "", refusal)


def _discord_bad_day(folder: Path) -> BadDay:
    adapter = DiscordAdapter(folder)

    def refusal(text: str) -> Fault:
        return Fault(status=400, body={"message": "Invalid Form Body", "code": 50035}, text=text, times=None)

    return _faulty(adapter, adapter.fake.faults, "/channels/", refusal)


def _telegram_bad_day(folder: Path) -> BadDay:
    adapter = TelegramAdapter(folder, chaos=0.02)

    def refusal(text: str) -> Fault:
        body = {"ok": False, "error_code": 400, "description": "Bad Request: can't parse entities: no end tag"}
        return Fault(status=400, body=body, text=text, times=None)

    return _faulty(adapter, adapter.fake.faults, "", refusal)


def _web_bad_day(folder: Path) -> BadDay:
    # A tab per conversation; the live channel cut mid-stream, a slow reader, a reconnect with a stale cursor
    adapter = WebAdapter(folder, ("general", "random", "ops"), flaky=True)
    return BadDay(
        adapter,
        lambda: adapter.process,
        adapter.misbehave,
        lambda: adapter.bad_moments,
        adapter.moments_pending,
        per_round=2,
    )


BAD_DAY: dict[str, Callable[[Path], BadDay]] = {
    "slack": _slack_bad_day,
    "discord": _discord_bad_day,
    "telegram": _telegram_bad_day,
    "web": _web_bad_day,
}


def _random_fault(rng: random.Random, route: str, kind: str) -> Fault:
    """One bad answer: a 5xx (JSON or an HTML page), a cut connection, a slow answer or a burst of 429s."""
    slack = kind == "slack"
    writes = {
        "slack": ("chat.postMessage", "chat.update", "conversations."),
        "telegram": ("sendMessage", "editMessageText"),  # getUpdates: test_telegram_process.py
    }.get(kind, (route,))
    where = rng.choice(writes)
    roll = rng.random()
    if roll < 0.25:
        return Fault(status=503, body={"ok": False, "error": "service_unavailable", "message": "down"}, route=where)
    if roll < 0.4:
        return Fault(status=502 if slack else 503, body=HTML_502, route=where)
    if roll < 0.6:
        return Fault(route=where, cut=rng.choice(("before", "after")))
    if roll < 0.75:
        return Fault(route=where, cut="", status=503, delay=rng.uniform(0.5, 2.0))
    retry = {"Retry-After": "1"}
    body = (
        {"ok": False, "error": "ratelimited"}
        if slack
        else {"ok": False, "error_code": 429, "description": "Too Many Requests", "parameters": {"retry_after": 1}}
        if kind == "telegram"
        else {"message": "slow down", "retry_after": 0.5, "global": False}
    )
    return Fault(status=429, body=body, headers=retry, route=where, times=rng.randrange(2, 5))


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(BAD_DAY))
async def test_kill_9_and_a_bad_day_never_lose_or_duplicate_and_refusals_are_one_notice_each(
    kind: str, tmp_path: Path
) -> None:
    """200 entries across 3 conversations while the adapter is killed and its platform answers badly at random."""
    case = BAD_DAY[kind](tmp_path)
    adapter = case.adapter
    rng = random.Random(20261127)
    channels = ("general", "random", "ops")
    markers: list[str] = []
    refused: list[str] = []
    entries: list[BaseEntry] = []
    while len(entries) < 200:
        n = len(entries)
        conversation = adapter.conversation(rng.choice(channels), "ann")
        roll = rng.random()
        if roll < 0.12:
            text = f"streamed reply {n:03}. " + "x" * rng.randrange(0, 40)
            pieces = [text[i : i + 7] for i in range(0, len(text), 7)]
            entries += [DeltaEntry(text=p, item_id=f"item-{n}", conversation=conversation) for p in pieces]
            entries.append(ResponseEntry(text=text, conversation=conversation))
            markers.append(f"streamed reply {n:03}.")
        elif roll < 0.17:
            (refused if case.refusal is not None else markers).append(f"REFUSED{n:03}")
            entries.append(ResponseEntry(text=f"a reply the platform refuses REFUSED{n:03}", conversation=conversation))
        elif roll < 0.27:
            words = [f"w{n:03}.{i:03}" for i in range(120)]
            entries.append(ResponseEntry(text=f"long reply {n:03}. " + " ".join(words), conversation=conversation))
            markers += [f"long reply {n:03}.", *words]
        else:
            entries.append(ResponseEntry(text=f"plain reply {n:03}.", conversation=conversation))
            markers.append(f"plain reply {n:03}.")
    if case.refusal is not None and case.faults is not None:
        case.faults.add(*(case.refusal(marker) for marker in refused))
    bad_answers = case.bad_answers
    made = asyncio.Event()
    """Set when a round has made bad answers."""

    async def feed() -> None:
        journal = FileJournal(adapter.journal, durability="never")
        try:
            for entry in entries:
                await journal.append(entry)
                await asyncio.sleep(rng.uniform(0, 0.04))
            # A fast machine can deliver all 200 before the platform has answered badly 20 times:
            # more replies, streamed ones among them (every write route then gets calls), keep it
            # busy (and the kills going) until it has, bounded. A reply is added only while a bad
            # answer made waits for a request to meet it; else the next round makes more (a slow,
            # loaded machine's rounds are slow: replies alone would not bring bad answers sooner).
            extra = 0
            while bad_answers() < 20:
                assert extra < 400, f"only {bad_answers()} bad answers after {extra} more replies"
                if not case.pending():
                    made.clear()
                    async with asyncio.timeout(60):
                        await made.wait()
                    continue
                conversation = adapter.conversation(channels[extra % 3], "ann")
                marker = f"extra reply {extra:03}."
                markers.append(marker)
                text = marker + " " + "y" * 30
                if extra % 2 == 0:
                    for i in range(0, len(text), 7):
                        await journal.append(
                            DeltaEntry(text=text[i : i + 7], item_id=f"extra-{extra}", conversation=conversation)
                        )
                        await asyncio.sleep(rng.uniform(0, 0.04))
                await journal.append(ResponseEntry(text=text, conversation=conversation))
                extra += 1
                # Paced by delivery, not by the clock: faults are added once per kill, and on a loaded
                # machine an adapter's restart takes seconds (more replies meanwhile would add none).
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(30):
                        while not await _visible(adapter, marker):
                            await asyncio.sleep(0.05)
        finally:
            await journal.aclose()

    def exited_by_itself() -> bool:
        process = case.process()
        return process is not None and process.returncode not in (None, -signal.SIGKILL)

    await adapter.start()
    feeder = asyncio.create_task(feed())
    kills = 0
    try:
        while not feeder.done() or kills < 8:
            for _ in range(rng.randrange(1, 4) * case.per_round):
                await case.misbehave(rng)
            made.set()
            await asyncio.sleep(rng.uniform(0.2, 0.8))
            assert not exited_by_itself(), "the adapter exited on a bad answer"
            await adapter.kill()
            kills += 1
            await adapter.start()
        await feeder
        await _until("the last message", lambda: _restarted_until(adapter, markers[-1]), timeout=180)
        await _until("every marker", lambda: _all_shown(adapter, markers), timeout=120)
        await _until("every refusal's notice", lambda: _notices_shown(adapter, len(refused)), timeout=120)
        assert not exited_by_itself(), "the adapter exited on a bad answer"
    finally:
        await close(adapter)
    shown = await adapter.messages()
    screen = "\n".join(message.text for message in shown)
    counts = {marker: screen.count(marker) for marker in markers}
    duplicated = {marker: count for marker, count in counts.items() if count > 1}
    missing = [marker for marker, count in counts.items() if count == 0]
    assert not missing, (kills, duplicated, missing)
    _assert_no_repeats_but_documented(adapter, markers, duplicated, kills)
    notices = [m for m in shown if "refused to show a message here" in m.text]
    assert len(notices) == len(refused) and not [m for m in refused if m in screen], (len(notices), refused)
    hits = bad_answers()
    print(f"{kind}: {len(markers)} markers, {len(refused)} refused, {kills} kills, {hits} bad answers")
    assert kills >= 8 and hits >= 20, (kills, hits)


async def _notices_shown(adapter: AdapterUnderTest, count: int) -> bool:
    if not adapter.alive():
        await adapter.start()
    return sum("refused to show a message here" in m.text for m in await adapter.messages()) >= count


async def _all_shown(adapter: AdapterUnderTest, markers: list[str]) -> bool:
    if not adapter.alive():
        await adapter.start()
    screen = "\n".join(message.text for message in await adapter.messages())
    return all(marker in screen for marker in markers)
