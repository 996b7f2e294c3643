"""Attacks on the Telegram adapter through what anyone in a chat can send: a stranger's button
press, a member's forged admin action, a bot posing as an allowed user, markup in a reply."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "adapters"))

from telegram_fake import FakeMessage, FakeTelegram
from telegram_under_test import GROUP, start_adapter

from coven_codex.entries import ApprovalRequestEntry, ResponseEntry
from coven_codex.journal import FileJournal

ANN, BOB, STRANGER = 5001, 5002, 5009
CONVERSATION = f"telegram:/{GROUP}/"


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[tuple[FakeTelegram, Path]]:
    fake = FakeTelegram()
    await fake.start()
    log = tmp_path / "adapter.log"
    journal = tmp_path / "journal.jsonl"
    with log.open("ab") as out:
        process = await start_adapter(
            journal, fake.base, stderr=out.fileno(), allow_users=[str(ANN), str(BOB)], admins=[str(ANN)]
        )
    try:
        await _until(lambda: "connected as" in log.read_text())
        yield fake, journal
    finally:
        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(20):
            await process.wait()
        await fake.stop()
    assert process.returncode == 0, log.read_text()


async def _until(condition: Callable[[], bool], seconds: float = 30.0) -> None:
    async with asyncio.timeout(seconds):
        while not condition():
            await asyncio.sleep(0.05)


def _kinds(journal: Path) -> list[str]:
    if not journal.exists():
        return []
    return [json.loads(line)["kind"] for line in journal.read_text().splitlines() if line.strip()]


async def _append(journal: Path, *entries: ResponseEntry | ApprovalRequestEntry) -> None:
    opened = FileJournal(journal, durability="never")
    try:
        for entry in entries:
            await opened.append(entry)
    finally:
        await opened.aclose()


def _bot_message(fake: FakeTelegram, text: str) -> FakeMessage:
    return next(m for m in fake.in_chat(GROUP) if text in m.text)


async def test_a_strangers_press_of_approve_and_a_members_forged_new_are_refused(
    running: tuple[FakeTelegram, Path],
) -> None:
    fake, journal = running
    await _append(journal, ApprovalRequestEntry(request_id="r1", action="rm -rf /", conversation=CONVERSATION))
    await _until(lambda: any("r1" in m.text for m in fake.in_chat(GROUP)))
    request = _bot_message(fake, "r1")
    fake.press(STRANGER, request, "approve r1")
    await _until(lambda: any("not allowed" in m.text for m in fake.in_chat(GROUP)))
    fake.press(BOB, request, "new")  # callback_data is whatever a client sends
    await _until(lambda: any("Only an admin" in m.text for m in fake.in_chat(GROUP)))
    fake.user_message(ANN, "a marker", chat_id=GROUP, mention=True)
    await _until(lambda: "thought" in _kinds(journal))
    assert "approval" not in _kinds(journal) and "reset" not in _kinds(journal)
    assert len(fake.answered) == 2  # every press is answered, refused or not


async def test_a_bot_using_an_allowed_users_id_is_ignored(running: tuple[FakeTelegram, Path]) -> None:
    fake, journal = running
    fake.user_message(ANN, "from a bot", chat_id=GROUP, mention=True, bot=True)
    fake.user_message(BOB, "a marker", chat_id=GROUP, mention=True)
    await _until(lambda: "thought" in _kinds(journal))
    assert "from a bot" not in journal.read_text()


async def test_markup_in_a_reply_is_shown_as_text_never_as_tags(running: tuple[FakeTelegram, Path]) -> None:
    fake, journal = running
    hostile = '</code></pre><a href="tg://user?id=1">x</a> <b>& &amp; `</b>'
    await _append(journal, ResponseEntry(text=hostile, conversation=CONVERSATION))
    await _until(lambda: any("tg://" in m.text for m in fake.in_chat(GROUP)))
    [shown] = [m for m in fake.in_chat(GROUP) if "tg://" in m.text]
    assert shown.parse_mode == "HTML" and shown.text == f"codex: {hostile}"
