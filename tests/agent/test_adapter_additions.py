"""What the daemon adds for chat adapters, unit by unit (issue 11, item 2): ``reset`` entries,
token usage on turn ends, ``in_reply_to`` on the entries of a turn, and images in.

The sessions run against the fake Codex of ``test_session_units``; the rollout translator
against the recorded rollouts of ``tests/fixtures/rollouts``. The same behaviour against the
real Codex CLI is in ``test_adapter_additions_e2e.py``.
"""

from __future__ import annotations

import asyncio
import struct
import uuid
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from test_session_units import Rig, errors, make_rig, replies, stop, turn_ends

from coven_codex.agent.state import SessionState
from coven_codex.attachments import AttachmentRefused, check_images
from coven_codex.codex.drivers import ImageInput
from coven_codex.codex.drivers.app_server import input_items
from coven_codex.codex.drivers.exec import exec_usage, image_args
from coven_codex.codex.thought import Thought
from coven_codex.conversation.session import Session
from coven_codex.entries import (
    Attachment,
    BaseEntry,
    CancelEntry,
    ErrorEntry,
    ResetEntry,
    StatusEntry,
    ThoughtEntry,
    TokenUsage,
)
from coven_codex.journal import START
from coven_codex.rollout import RolloutTranslator
from coven_codex.tailing import LineSplitter

pytestmark = pytest.mark.timeout(60)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "rollouts"


def png_bytes() -> bytes:
    """A real PNG of one pixel."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00"))
        + chunk(b"IEND", b"")
    )


def translate(path: Path, state: SessionState | None = None) -> list[BaseEntry]:
    lookup = state.thought_of if state is not None else None
    translator = RolloutTranslator("c", "T", reply_to=lookup)
    return [entry for line in LineSplitter(0).feed(path.read_bytes()) for entry in translator.feed(line)]


# -- token usage -------------------------------------------------------------------------------------
def test_turn_completed_carries_the_turns_token_usage_from_the_rollout() -> None:
    entries = translate(FIXTURES / "0.169.0" / "app_server_two_turns.jsonl")
    ends = [e for e in entries if isinstance(e, StatusEntry) and e.state == "turn_completed"]
    # Each turn used 10 + 5 tokens (the thread's total grows 15 → 30): the turn's own share, not the total.
    expected = TokenUsage(
        input_tokens=10, cached_input_tokens=0, output_tokens=5, reasoning_output_tokens=0, total_tokens=15
    )
    assert [e.usage for e in ends] == [expected, expected]
    assert ends[0].model_dump(mode="json")["usage"]["total_tokens"] == 15


def test_exec_turn_completed_usage_is_read() -> None:
    usage = exec_usage({"input_tokens": 10, "cached_input_tokens": 0, "output_tokens": 5})
    assert usage == TokenUsage(input_tokens=10, cached_input_tokens=0, output_tokens=5, total_tokens=15)
    assert exec_usage(None) is None and exec_usage({"input_tokens": "x"}) is None


# -- in_reply_to from the rollout ----------------------------------------------------------------------
def test_rollout_entries_carry_the_thought_by_client_id() -> None:
    entries = translate(FIXTURES / "0.169.0" / "app_server_two_turns.jsonl", SessionState(conversation="c"))
    by_kind = [(e.kind, getattr(e, "in_reply_to", None)) for e in entries]
    assert ("response", "thought-1") in by_kind and ("response", "thought-2") in by_kind
    ends = [e for e in entries if isinstance(e, StatusEntry) and e.state == "turn_completed"]
    assert [e.in_reply_to for e in ends] == ["thought-1", "thought-2"]


def test_rollout_entries_carry_the_thought_by_ordinal_and_text_without_client_ids() -> None:
    state = SessionState(conversation="c")
    state.hand_over(Thought("first-id", "first question", START))  # the thread's user message 0
    state.user_messages = 1  # (delivered)
    state.hand_over(Thought("second-id", "second question", START))
    entries = translate(FIXTURES / "0.47.0" / "multi_turn.jsonl", state)
    responses = [e for e in entries if e.kind == "response"]
    assert [getattr(e, "in_reply_to", None) for e in responses] == ["first-id", "second-id", "second-id"]
    starts = [e for e in entries if isinstance(e, StatusEntry) and e.state == "turn_started"]
    assert [e.in_reply_to for e in starts] == ["first-id", "second-id"]
    # A message whose text is not the expected thought's is not given a wrong id.
    other = SessionState(conversation="c")
    other.hand_over(Thought("x", "something else", START))
    assert all(
        getattr(e, "in_reply_to", None) is None for e in translate(FIXTURES / "0.47.0" / "multi_turn.jsonl", other)
    )


def _by_ordinal(ordinal: int, client_id: str | None, text: str) -> str:
    """A lookup naming each user message's thought by its ordinal (the fixtures' texts vary)."""
    return client_id or f"thought-{ordinal}"


def _translate_by_ordinal(path: Path) -> list[BaseEntry]:
    translator = RolloutTranslator("c", "T", reply_to=_by_ordinal)
    return [entry for line in LineSplitter(0).feed(path.read_bytes()) for entry in translator.feed(line)]


def test_a_turn_closed_for_want_of_an_end_keeps_its_own_thought_and_usage() -> None:
    # 0.104: Codex killed mid-turn wrote no end; the translator closes the turn when the next starts.
    entries = _translate_by_ordinal(FIXTURES / "0.104.0" / "turn_never_ends.jsonl")
    shown = [(e.kind, getattr(e, "state", None), getattr(e, "in_reply_to", None)) for e in entries]
    assert shown == [
        ("status", "turn_started", "thought-0"),
        ("tool_call", None, "thought-0"),
        ("tool_result", None, "thought-0"),
        ("status", "turn_aborted", "thought-0"),
        ("status", "turn_started", "thought-1"),
        ("response", None, "thought-1"),
        ("status", "turn_completed", "thought-1"),
    ]
    closed = next(e for e in entries if isinstance(e, StatusEntry) and e.state == "turn_aborted")
    assert closed.usage is not None and closed.usage.total_tokens == 15


def test_activities_and_the_rollouts_errors_carry_the_thought() -> None:
    activities = [e for e in _translate_by_ordinal(FIXTURES / "0.135.0" / "web_search.jsonl") if e.kind == "activity"]
    assert activities and all(getattr(e, "in_reply_to", None) == "thought-0" for e in activities)
    errors = [e for e in _translate_by_ordinal(FIXTURES / "0.169.0" / "http_401.jsonl") if isinstance(e, ErrorEntry)]
    assert [e.in_reply_to for e in errors] == ["thought-0"]


# -- sessions ------------------------------------------------------------------------------------------
@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    made = make_rig(tmp_path, journal=tmp_path / "journal.jsonl")
    yield made
    await stop(made)


async def test_every_entry_of_a_turn_carries_its_thoughts_id(rig: Rig) -> None:
    session = rig.session()
    first = rig.offer(session, "hello one")
    second = rig.offer(session, "hello two")
    entries = await rig.wait(lambda es: len(turn_ends(es)) == 2, "two turns")
    of_turns = [e for e in entries if e.kind == "response" or getattr(e, "state", "").startswith("turn_")]
    assert {(e.kind, getattr(e, "state", None), getattr(e, "in_reply_to", None)) for e in of_turns} == {
        ("response", None, first),
        ("status", "turn_started", first),
        ("status", "turn_completed", first),
        ("response", None, second),
        ("status", "turn_started", second),
        ("status", "turn_completed", second),
    }
    assert session.state.reply_to == second  # persisted: a restarted daemon's entries carry it too


def _reset(rig: Rig) -> tuple[ResetEntry, int]:
    rig.positions += 1
    return ResetEntry(id=uuid.uuid4().hex, conversation="c"), rig.positions


async def test_reset_ends_the_thread_and_the_next_thought_starts_a_new_one(rig: Rig) -> None:
    session = rig.session()
    rig.offer(session, "hello before")
    await rig.wait(lambda es: len(turn_ends(es)) == 1, "the first turn")
    old_thread = session.state.thread_id
    reset, position = _reset(rig)
    assert session.offer_reset(reset, position)
    entries = await rig.wait(lambda es: any(getattr(e, "state", "") == "session_reset" for e in es), "the reset")
    status = next(e for e in entries if isinstance(e, StatusEntry) and e.state == "session_reset")
    assert status.id == f"reset@{position}" and status.thread_id == old_thread and old_thread in status.text
    await rig.wait(lambda es: position in rig.finished, "the reset done")
    assert session.state.thread_id is None and reset.id in session.state.delivered
    rig.offer(session, "hello after")
    await rig.wait(lambda es: len(turn_ends(es)) == 2, "the second turn")
    assert session.state.thread_id not in (None, old_thread)
    assert rig.codex.drivers[-1].thread_id == session.state.thread_id  # opened fresh, not resumed
    # Read again after a restart, the reset is not acted on again.
    assert not session.offer_reset(reset, position)
    await asyncio.sleep(0.2)
    statuses = [e for e in await rig.entries() if isinstance(e, StatusEntry) and e.state == "session_reset"]
    assert len(statuses) == 1


async def test_reset_interrupts_a_running_turn_first(rig: Rig) -> None:
    session = rig.session()
    rig.offer(session, "hang on")
    await rig.wait(lambda es: any(getattr(e, "state", "") == "turn_started" for e in es), "the turn")
    reset, position = _reset(rig)
    session.offer_reset(reset, position)
    entries = await rig.wait(lambda es: any(getattr(e, "state", "") == "session_reset" for e in es), "the reset")
    states = [e.state for e in entries if isinstance(e, StatusEntry)]
    assert states.index("turn_aborted") < states.index("session_reset")


# -- images --------------------------------------------------------------------------------------------
def _folder(rig: Rig) -> Path:
    folder = rig.tmp / "journal.jsonl.attachments"
    folder.mkdir(exist_ok=True)
    return folder


def _offer_with(rig: Rig, session: Session, url: str) -> tuple[str, int]:
    rig.positions += 1
    entry = ThoughtEntry(
        id=uuid.uuid4().hex,
        conversation="c",
        text="look at this",
        attachments=[Attachment(url=url, media_type="image/png", name="pic.png")],
    )
    assert entry.id is not None
    session.offer_thought(entry, rig.positions)
    return entry.id, rig.positions


async def test_an_image_in_the_attachments_folder_reaches_codex(rig: Rig) -> None:
    session = rig.session()
    image = _folder(rig) / "a.png"
    image.write_bytes(png_bytes())
    thought, _ = _offer_with(rig, session, image.as_uri())
    await rig.wait(lambda es: replies(es) == ["echo: look at this"], "the reply")
    assert rig.codex.images == [(thought, (ImageInput(path=image.resolve()),))]


@pytest.mark.parametrize(
    ("case", "says"),
    [
        ("missing", "does not exist"),
        ("outside", "outside the journal's attachments folder"),
        ("symlink-out", "outside the journal's attachments folder"),
        ("not-image", "is not a PNG, JPEG, GIF or WebP image"),
        ("too-big", "the limit (max_attachment_bytes) is"),
        ("https-on-exec", "`codex exec` takes only image files"),
        ("ftp", "neither a file:// nor an https:// address"),
    ],
)
async def test_a_bad_attachment_refuses_the_thought_once(rig: Rig, case: str, says: str) -> None:
    session = rig.session()
    folder = _folder(rig)
    url = (folder / "nothing.png").as_uri()
    if case == "outside":
        outside = rig.tmp / "ws.png"
        outside.write_bytes(png_bytes())
        url = outside.as_uri()
    elif case == "symlink-out":
        outside = rig.tmp / "planted.png"
        outside.write_bytes(png_bytes())
        (folder / "link.png").symlink_to(outside)
        url = (folder / "link.png").as_uri()
    elif case == "not-image":
        (folder / "x.png").write_bytes(b"#!/bin/sh\necho not an image\n")
        url = (folder / "x.png").as_uri()
    elif case == "too-big":
        (folder / "big.png").write_bytes(png_bytes() + b"\x00" * (21 * 1024 * 1024))
        url = (folder / "big.png").as_uri()
    elif case == "https-on-exec":
        url = "https://example.com/a.png"
    elif case == "ftp":
        url = "ftp://example.com/a.png"
    thought, position = _offer_with(rig, session, url)
    entries = await rig.wait(lambda es: bool(errors(es)), "the refusal")
    await rig.wait(lambda es: position in rig.finished, "the thought passed over")
    # Read again (a restart), it is refused again, and the journal still has one error.
    session.offer_thought(
        ThoughtEntry(id=thought, conversation="c", text="look at this", attachments=[Attachment(url=url)]), position
    )
    await asyncio.sleep(0.3)
    entries = await rig.entries()
    refused = errors(entries)
    assert len(refused) == 1, refused
    error = refused[0]
    assert isinstance(error, ErrorEntry) and error.code == "REFUSED" and error.id == f"refused@{position}"
    assert says in error.text and error.in_reply_to == thought and error.hint
    assert rig.codex.sends == []


def test_https_images_are_accepted_where_the_driver_takes_urls(tmp_path: Path) -> None:
    images = check_images([Attachment(url="https://example.com/a.png")], folder=tmp_path, max_bytes=10, urls=True)
    assert images == (ImageInput(url="https://example.com/a.png"),)
    with pytest.raises(AttachmentRefused, match="no attachments folder"):
        check_images([Attachment(url="file:///etc/hostname")], folder=None, max_bytes=10, urls=True)


def test_the_drivers_pass_images_on() -> None:
    thought = Thought(
        "id-1", "see", START, images=(ImageInput(path=Path("/j.attachments/a.png")), ImageInput(url="https://x/b.png"))
    )
    assert input_items(thought) == [
        {"type": "localImage", "path": "/j.attachments/a.png"},
        {"type": "image", "url": "https://x/b.png"},
        {"type": "text", "text": "see"},
    ]
    assert image_args(thought) == ["--image", "/j.attachments/a.png"]


async def test_a_session_cancelled_as_a_message_arrives_stops(rig: Rig) -> None:
    """Python 3.11's ``asyncio.wait_for`` returns the result instead of raising when the awaited
    get completes in the same step as the cancel: the session then went on waiting (for the idle
    timeout, 30 minutes) and could not be stopped. Seen as a hung teardown under load."""
    session = rig.session()
    rig.offer(session, "hello there")
    await rig.wait(lambda es: len(turn_ends(es)) == 1, "the turn")
    await asyncio.sleep(0.1)  # idle now, waiting for its inbox with the idle-reap timeout
    task = rig.tasks[-1]
    session.offer_cancel(CancelEntry(conversation="c"))  # the inbox's get completes...
    task.cancel()  # ...in the same step as the cancel
    done, _ = await asyncio.wait({task}, timeout=5)
    assert task in done and task.cancelled()
