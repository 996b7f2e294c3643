"""Discord as a chat that feels native (issue 30): the progress card, typing kept up, rendering, approvals.

The real ``coven-codex discord`` process against the local fake of Discord, with the adapter's
default ``render = "quiet"``.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from discord_fake import CHANNEL_ID, GUILD_ID, TEST_TOKEN, FakeDiscord, FakeMessage, serve, start_adapter, stop, until
from running import append
from turns import tool_turn

from coven_codex.entries import ApprovalRequestEntry, ResponseEntry, StatusEntry

ALLOWED = "5000000000000000001"
CONVERSATION = f"discord:{GUILD_ID}/{CHANNEL_ID}/"


@pytest.fixture
async def discord(tmp_path: Path) -> AsyncIterator[tuple[FakeDiscord, Path]]:
    fake = FakeDiscord(token=TEST_TOKEN)
    journal = tmp_path / "chat.jsonl"
    async with serve(fake) as port:
        process = await start_adapter(journal, port, allow_users=[ALLOWED], render="quiet")
        try:
            async with asyncio.timeout(30):
                await fake.identified.wait()
            await fake.dispatch("MESSAGE_CREATE", fake.user_message(ALLOWED, "start"))
            await until(lambda: "start" in journal.read_text() if journal.exists() else False)
            yield fake, journal
        finally:
            await stop(process)


def _card(fake: FakeDiscord) -> FakeMessage | None:
    return next((m for m in fake.in_channel(CHANNEL_ID) if m.content.startswith(("working", "done"))), None)


def _buttons(message: FakeMessage) -> list[str]:
    return [str(item["custom_id"]) for row in message.components for item in row.get("components", [])]


async def test_a_turn_of_thirty_commands_is_one_card_edited_in_place_and_the_reply(
    discord: tuple[FakeDiscord, Path],
) -> None:
    fake, journal = discord
    await append(journal, *tool_turn(CONVERSATION, 30, "thirty commands ran."))
    await until(
        lambda: (
            (c := _card(fake)) is not None
            and c.content.startswith("done")
            and any(m.content == "codex: thirty commands ran." for m in fake.in_channel(CHANNEL_ID))
        ),
        30,
    )
    messages = fake.in_channel(CHANNEL_ID)
    assert len(messages) == 2, [m.content for m in messages]  # the card, then the reply (which notifies)
    card = _card(fake)
    assert card is not None and card.edits >= 1 and messages[0] is card
    lines = card.content.splitlines()
    assert lines[0].startswith("done in ") and lines[0].endswith("· 31 steps") and lines[-1] == "✓ $ echo step 29"
    assert _buttons(card)[0].startswith("details ")


async def test_details_answer_with_the_turn_s_tool_output(discord: tuple[FakeDiscord, Path]) -> None:
    fake, journal = discord
    await append(journal, *tool_turn(CONVERSATION, 9, "nine ran."))
    await until(lambda: (c := _card(fake)) is not None and c.content.startswith("done"), 30)
    card = _card(fake)
    assert card is not None and "✗ $ false (exit 1)" in card.content
    await fake.dispatch("INTERACTION_CREATE", fake.button_press(ALLOWED, card.id, _buttons(card)[0]))
    await until(lambda: any("output of step 08" in m.content for m in fake.in_channel(CHANNEL_ID)))
    details = next(m for m in fake.in_channel(CHANNEL_ID) if "output of step 08" in m.content)
    assert "output of step 00" in details.content


async def test_typing_is_kept_up_while_a_turn_runs_and_stops_with_it(discord: tuple[FakeDiscord, Path]) -> None:
    fake, journal = discord
    before = len(fake.typing)
    await append(journal, StatusEntry(state="turn_started", conversation=CONVERSATION))
    await until(lambda: len(fake.typing) >= before + 2, 30)  # Discord's indicator fades after about 10 s
    times = fake.typing_times[before:]
    assert all(7.0 <= later - earlier <= 10.0 for earlier, later in itertools.pairwise(times)), times
    await append(journal, StatusEntry(state="turn_completed", conversation=CONVERSATION))
    ended = len(fake.typing)
    await asyncio.sleep(9.0)  # past a refresh that would have come: the turn's end stopped it
    assert len(fake.typing) == ended


async def test_a_table_in_a_reply_is_shown_as_an_aligned_code_block(discord: tuple[FakeDiscord, Path]) -> None:
    fake, journal = discord
    reply = "Sizes:\n\n| file | lines |\n|---|--:|\n| a.py | 12 |\n| long_name.py | 3400 |"
    await append(journal, ResponseEntry(text=reply, conversation=CONVERSATION))
    await until(lambda: any("a.py" in m.content for m in fake.in_channel(CHANNEL_ID)))
    shown = next(m.content for m in fake.in_channel(CHANNEL_ID) if "a.py" in m.content)
    assert shown == (
        "codex: Sizes:\n\n```\nfile         | lines\n-------------+------\na.py         | 12\nlong_name.py | 3400\n```"
    )


async def test_an_answered_approval_shows_who_decided_and_its_buttons_are_disabled(
    discord: tuple[FakeDiscord, Path],
) -> None:
    fake, journal = discord
    await append(journal, ApprovalRequestEntry(request_id="r1", action="rm -rf build", conversation=CONVERSATION))
    await until(lambda: any("rm -rf build" in m.content for m in fake.in_channel(CHANNEL_ID)))
    request = next(m for m in fake.in_channel(CHANNEL_ID) if "rm -rf build" in m.content)
    assert _buttons(request) == ["approve r1", "approve-session r1", "deny r1"]
    await fake.dispatch("INTERACTION_CREATE", fake.button_press(ALLOWED, request.id, "approve-session r1"))
    await until(lambda: "approved for the session" in request.content)
    assert request.content.endswith("approved for the session by presser (5000000000000000001)")
    disabled = [item.get("disabled") for row in request.components for item in row.get("components", [])]
    assert disabled == [True, True, True] and request.edits == 1
