"""Files out on Telegram: a message carrying a file is ``sendDocument`` (multipart) with the file and its
caption, in the conversation's topic; only a file of the journal's attachments folder is sent. The
platform through python-telegram-bot against the fake Bot API."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from telegram_fake import TEST_TOKEN, FakeTelegram

from coven_codex.adapters.kit.platform import Address, FileUpload, Outgoing, PlatformError
from coven_codex.adapters.telegram.platform import TelegramPlatform, make_bot
from coven_codex.attachments import ImageStore
from coven_codex.support.secret import Secret

GROUP = -1001000000001
TOPIC = Address(channel=str(GROUP), thread="11")
REPORT = b"%PDF-1.7\n" + bytes(range(256)) * 8


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    state = FakeTelegram()
    await state.start()
    try:
        yield state
    finally:
        await state.stop()


@pytest.fixture
async def platform(fake: FakeTelegram, tmp_path: Path) -> AsyncIterator[TelegramPlatform]:
    bot = make_bot(Secret(TEST_TOKEN), fake.base)
    telegram = TelegramPlatform(bot, poll_timeout=1, images=ImageStore(tmp_path / "journal.jsonl.attachments"))
    await telegram.start()
    try:
        yield telegram
    finally:
        await telegram.close()
        await bot.shutdown()


async def test_a_file_is_sent_as_a_document_with_its_caption_in_the_topic(
    platform: TelegramPlatform, fake: FakeTelegram, tmp_path: Path
) -> None:
    stored = tmp_path / "journal.jsonl.attachments" / "out" / "abc.pdf"
    stored.parent.mkdir(parents=True)
    stored.write_bytes(REPORT)
    upload = FileUpload(stored, "report.pdf", "application/pdf", len(REPORT))
    message_id = await platform.post(TOPIC, Outgoing("<i>the report</i>", style="file", file=upload), "k")
    [shown] = fake.in_chat(GROUP, 11)
    assert str(shown.message_id) == message_id
    assert shown.document == ("report.pdf", REPORT) and shown.text == "the report"


async def test_a_file_outside_the_attachments_folder_is_refused_and_nothing_is_sent(
    platform: TelegramPlatform, fake: FakeTelegram, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.pdf"
    secret.write_bytes(REPORT)
    upload = FileUpload(secret, "secret.pdf", "application/pdf", len(REPORT))
    with pytest.raises(PlatformError, match="not in the journal's attachments folder"):
        await platform.post(TOPIC, Outgoing("forged", file=upload), "k")
    assert fake.in_chat(GROUP, 11) == []
