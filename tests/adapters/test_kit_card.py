"""The progress card (``render = "quiet"``): one message per turn edited in place, the reply a message of its own.

The kit's real runner drives the recording fake platform (``fake_platform.py``) in its own process;
what a user sees is the platform's record.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from adapters_under_test import FakeAdapter, Shown
from turns import tool_turn as _turn

from coven_codex.adapters.kit.card import SHOWN_STEPS, Card, Cards, card_key, command_of
from coven_codex.entries import (
    ActivityEntry,
    ApprovalRequestEntry,
    BaseEntry,
    ToolCallEntry,
    ToolResultEntry,
)
from coven_codex.journal import FileJournal, JournalRecord


async def _append(path: Path, entries: list[BaseEntry], pause: float = 0.0) -> None:
    journal = FileJournal(path, durability="never")
    try:
        for entry in entries:
            await journal.append(entry)
            if pause:
                await asyncio.sleep(pause)
    finally:
        await journal.aclose()


async def _entries(path: Path) -> list[BaseEntry]:
    journal = FileJournal(path)
    try:
        return [item.entry for item in await journal.read() if isinstance(item, JournalRecord)]
    finally:
        await journal.aclose()


async def _until(adapter: FakeAdapter, check: Callable[[list[Shown]], bool], timeout: float = 30) -> list[Shown]:
    async with asyncio.timeout(timeout):
        while True:
            shown = await adapter.messages()
            if check(shown):
                return shown
            await asyncio.sleep(0.05)


def _card(shown: list[Shown]) -> Shown | None:
    return next((m for m in shown if m.text.startswith(("working", "done", "failed", "cancelled"))), None)


async def test_thirty_tool_calls_post_one_card_edited_in_place_and_the_reply_on_its_own(tmp_path: Path) -> None:
    adapter = FakeAdapter(tmp_path, edit_interval=0.2, render="quiet")
    await adapter.start()
    conversation = adapter.conversation("general", "ann")
    try:
        await _append(adapter.journal, _turn(conversation, 30, "all thirty steps ran."), pause=0.01)
        shown = await _until(
            adapter,
            lambda s: (
                any("all thirty" in m.text for m in s) and _card(s) is not None and _card(s).text.startswith("done")
            ),
        )  # type: ignore[union-attr]
    finally:
        await adapter.stop()
    operations = adapter.operations()
    posts = [op for op in operations if op["op"] == "post"]
    assert len(posts) == 2, [op["text"] for op in posts]  # the card, then the reply (which notifies)
    card = _card(shown)
    plan = next(e for e in await _entries(adapter.journal) if isinstance(e, ActivityEntry))
    assert plan.id is not None and posts[0]["key"] == card_key(plan.id)  # posted under its first step's key
    assert posts[0]["buttons"] == [["Cancel", "cancel"]] and posts[1]["text"] == "codex: all thirty steps ran."
    assert card is not None
    lines = card.text.splitlines()
    assert lines[0].startswith("done in ") and lines[0].endswith("· 31 steps")  # a plan and 30 commands
    assert lines[1] == f"… {31 - SHOWN_STEPS} earlier steps" and len(lines) == 2 + SHOWN_STEPS
    assert lines[-1] == "✓ $ echo step 29"
    assert card.actions and card.actions[0].startswith("details ")
    edits = [op for op in operations if op["op"] == "edit"]
    assert 1 <= len(edits) <= 15, len(edits)  # coalesced at the edit interval, not one per step
    times = [float(op["t"]) for op in [posts[0], *edits]]  # type: ignore[arg-type]
    assert all(later - earlier >= 0.19 for earlier, later in itertools.pairwise(times)), times


async def test_a_failed_command_shows_its_exit_status_and_details_show_the_output(tmp_path: Path) -> None:
    adapter = FakeAdapter(tmp_path, edit_interval=0.2, render="quiet")
    await adapter.start()
    conversation = adapter.conversation("general", "ann")
    try:
        await _append(adapter.journal, _turn(conversation, 9, "nine steps."))
        shown = await _until(adapter, lambda s: (c := _card(s)) is not None and c.text.startswith("done"))
        card = _card(shown)
        assert card is not None and "✗ $ false (exit 1)" in card.text and "… 2 earlier steps" in card.text
        adapter.send_event({"type": "press", "channel": "general", "user": "ann", "action": card.actions[0]})
        shown = await _until(adapter, lambda s: any("output of step 08" in m.text for m in s))
    finally:
        await adapter.stop()
    details = "\n".join(m.text for m in shown if "output of step" in m.text)
    assert all(
        f"output of step {n:02}" in details for n in range(9) if n != 7
    )  # every step's output, the early ones too
    assert "1. look around\n2. count" in details


async def test_an_approval_request_stays_a_message_and_a_kill_9_shows_the_card_once(tmp_path: Path) -> None:
    adapter = FakeAdapter(tmp_path, edit_interval=0.2, render="quiet")
    await adapter.start()
    conversation = adapter.conversation("general", "ann")
    turn = _turn(conversation, 12, "done after a restart.")
    first, rest = turn[:14], turn[14:]
    first.append(ApprovalRequestEntry(request_id="r1", action="rm -rf build", conversation=conversation))
    try:
        await _append(adapter.journal, first)
        await _until(adapter, lambda s: any("rm -rf build" in m.text for m in s) and _card(s) is not None)
        await adapter.kill()  # the cursor was held at the card's first step: it is read again
        await adapter.start()
        await _append(adapter.journal, rest)
        shown = await _until(adapter, lambda s: (c := _card(s)) is not None and c.text.startswith("done"))
        await _until(adapter, lambda s: any("done after a restart" in m.text for m in s))
    finally:
        await adapter.stop()
    posts = [op for op in adapter.operations() if op["op"] == "post"]
    assert len(posts) == 3, [op["text"] for op in posts]  # card, approval request, reply: each once
    card = _card(shown)
    assert card is not None and "· 13 steps" in card.text.splitlines()[0]


def test_a_card_lists_the_latest_steps_and_counts_the_others() -> None:
    started = datetime(2026, 11, 27, 21, 0, tzinfo=UTC)
    card = Card("c", "e1", 0, started)
    for n in range(20):
        card.add(ToolCallEntry(tool="coven.add", arguments={"a": n}, call_id=f"c{n}"), reasoning=False)
    card.add(ToolResultEntry(text="boom", tool="coven.add", call_id="c19", is_error=True), reasoning=False)
    lines = card.lines(started + timedelta(seconds=75))
    assert lines[0] == "working · 1 min 15 s · 20 steps" and lines[1] == "… 12 earlier steps"
    assert lines[2] == "… coven.add(a=12)" and lines[-1] == "✗ coven.add(a=19)"
    assert command_of({"command": ["bash", "-lc", "ls -la"]}) == "ls -la" and command_of({"cmd": "pwd"}) == "pwd"
    assert command_of('{"command": ["git", "status"]}') == "git status" and command_of({"a": 1}) is None


def test_details_find_a_card_shown_as_done_before_its_end_is_recorded() -> None:
    """A Details press can come between the card's last edit ("done …") and its end's ledger record
    (an fsync, slow under load): the card is still open then, and its details are there all the same."""
    started = datetime(2026, 11, 27, 21, 0, tzinfo=UTC)
    cards = Cards()
    card = cards.start("c", "e1", 0, started, replayed=False)
    card.add(ToolCallEntry(tool="coven.add", arguments={"a": 1}, call_id="c1"), reasoning=False)
    card.close(started + timedelta(seconds=3), "done")
    assert cards.find("e1") is card  # (before: only closed cards were looked up, so "no longer kept")
    cards.finish(card)
    assert cards.find("e1") is card and cards.find("e2") is None


async def test_cards_are_posted_once_and_end_closed_while_the_adapter_kills_itself_after_posts_and_edits(
    tmp_path: Path,
) -> None:
    """Ten turns of twelve commands while the platform process SIGKILLs itself after 25 % of its posts and edits."""
    adapter = FakeAdapter(tmp_path, edit_interval=0.2, render="quiet", chaos=0.25)
    conversation = adapter.conversation("general", "ann")
    turns = [_turn(conversation, 12, f"turn {n:02} done.", tag=f"t{n}") for n in range(10)]
    await adapter.start()
    restarts = 0
    try:
        for entries in turns:
            await _append(adapter.journal, entries)
        async with asyncio.timeout(120):
            while True:
                if not adapter.alive():
                    restarts += 1
                    await adapter.start()
                shown = await adapter.messages()
                cards = [m for m in shown if m.text.startswith(("working", "done"))]
                if (
                    len(cards) == 10
                    and all(c.text.startswith("done") for c in cards)
                    and any("turn 09 done." in m.text for m in shown)
                ):
                    break
                await asyncio.sleep(0.1)
    finally:
        await adapter.stop()
    posts = [op for op in adapter.operations() if op["op"] == "post"]
    keys = [op["key"] for op in posts]
    assert len(keys) == len(set(keys)) == 20, (restarts, [op["text"][:30] for op in posts])  # 10 cards, 10 replies
    replies = [str(op["text"]) for op in posts if str(op["text"]).startswith("codex: turn")]
    assert sorted(replies) == [f"codex: turn {n:02} done." for n in range(10)]
    assert restarts >= 3, restarts
