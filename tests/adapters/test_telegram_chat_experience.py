"""Telegram as a chat that feels native (issue 30, on the kit): a turn is one progress card edited in
place and the reply, the card's Details button answers with the turn's tool output. The real
``coven-codex telegram`` process against the fake Bot API, with the adapter's default ``render = "quiet"``."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from running import append
from telegram_fake import FakeMessage, FakeTelegram
from telegram_under_test import start_adapter
from turns import tool_turn

ANN = 5001


async def _until(condition: Callable[[], bool], seconds: float = 30.0) -> None:
    async with asyncio.timeout(seconds):
        while not condition():
            await asyncio.sleep(0.05)


def _thoughts(journal: Path) -> list[dict[str, object]]:
    if not journal.exists():
        return []
    entries = [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]
    return [e for e in entries if e.get("kind") == "thought"]


@pytest.fixture
async def telegram(tmp_path: Path) -> AsyncIterator[tuple[FakeTelegram, Path, str]]:
    fake = FakeTelegram()
    await fake.start()
    journal = tmp_path / "journal.jsonl"
    process = await start_adapter(journal, fake.base, allow_users=[str(ANN)], render="quiet")
    try:
        fake.user_message(ANN, "start")
        await _until(lambda: bool(_thoughts(journal)))
        yield fake, journal, str(_thoughts(journal)[0]["conversation"])
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(20):
            await process.wait()
        await fake.stop()


def _card(fake: FakeTelegram) -> FakeMessage | None:
    return next((m for m in fake.in_chat(ANN) if m.text.startswith(("working", "done"))), None)


async def test_a_turn_of_thirty_commands_is_one_card_edited_in_place_and_the_reply(
    telegram: tuple[FakeTelegram, Path, str],
) -> None:
    fake, journal, conversation = telegram
    await append(journal, *tool_turn(conversation, 30, "thirty commands ran."))
    await _until(
        lambda: (
            (c := _card(fake)) is not None
            and c.text.startswith("done")
            and any("thirty commands ran." in m.text for m in fake.in_chat(ANN))
        )
    )
    messages = fake.in_chat(ANN)
    assert len(messages) == 2, [m.text for m in messages]  # the card, then the reply (which notifies)
    card = _card(fake)
    assert card is not None and card.edits >= 1 and messages[0] is card
    assert card.text.splitlines()[0].endswith("· 31 steps")
    assert [label for label, _ in card.buttons] == ["Details"]


async def test_the_card_s_details_button_answers_with_the_turn_s_tool_output(
    telegram: tuple[FakeTelegram, Path, str],
) -> None:
    fake, journal, conversation = telegram
    await append(journal, *tool_turn(conversation, 9, "nine ran."))
    await _until(lambda: (c := _card(fake)) is not None and c.text.startswith("done"))
    card = _card(fake)
    assert card is not None and "✗ $ false (exit 1)" in card.text
    fake.press(ANN, card, card.buttons[0][1])
    await _until(lambda: any("output of step 08" in m.text for m in fake.in_chat(ANN)))
    details = next(m for m in fake.in_chat(ANN) if "output of step 08" in m.text)
    assert "output of step 00" in details.text
