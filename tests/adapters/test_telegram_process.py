"""``coven-codex telegram`` as a process against the fake Bot API: start-up errors, the token never
logged, conversations, long polling through a bad day, images in (only for allowed senders, size-checked)."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest
from bad_day import HTML_502, Fault
from telegram_fake import TEST_TOKEN, FakeTelegram
from telegram_under_test import GROUP, start_adapter

from coven_codex.attachments.store import MAX_IMAGE_BYTES

ANN, BOB, STRANGER = 5001, 5002, 5009
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as state:
        yield state


def _entries(journal: Path, kind: str) -> list[dict[str, object]]:
    if not journal.exists():
        return []
    entries = [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]
    return [e for e in entries if e.get("kind") == kind]


async def _until(condition: Callable[[], bool], seconds: float = 30.0) -> None:
    async with asyncio.timeout(seconds):
        while not condition():
            await asyncio.sleep(0.05)


async def _run(
    tmp_path: Path, fake: FakeTelegram, *, env: dict[str, str] | None = None, **section: object
) -> tuple[asyncio.subprocess.Process, Path]:
    log = tmp_path / "adapter.log"
    with log.open("ab") as out:
        process = await start_adapter(
            tmp_path / "journal.jsonl",
            fake.base,
            stderr=out.fileno(),
            env=env,
            allow_users=[str(ANN), str(BOB)],
            admins=[str(ANN)],
            **section,
        )
    await _until(lambda: "connected as" in log.read_text() or process.returncode is not None)
    return process, log


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
    async with asyncio.timeout(20):
        await process.wait()


async def test_a_private_chat_a_group_and_a_forum_topic_are_three_conversations(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    process, log = await _run(tmp_path, fake)
    journal = tmp_path / "journal.jsonl"
    try:
        fake.user_message(ANN, "in private")
        fake.user_message(ANN, "in the group", chat_id=GROUP, mention=True)
        fake.user_message(BOB, "in the topic", chat_id=GROUP, thread=11, mention=True)
        fake.user_message(BOB, "not for the bot", chat_id=GROUP, thread=11)
        await _until(lambda: len(_entries(journal, "thought")) == 3)
    finally:
        await _stop(process)
    thoughts = {str(e["text"]): str(e["conversation"]) for e in _entries(journal, "thought")}
    assert thoughts == {
        "in private": f"telegram:/{ANN}/",
        "in the group": f"telegram:/{GROUP}/",
        "in the topic": f"telegram:/{GROUP}/11",
    }
    assert process.returncode == 0, log.read_text()


async def test_the_token_is_never_logged_even_at_debug_level(tmp_path: Path, fake: FakeTelegram) -> None:
    log = tmp_path / "adapter.log"
    config_journal = tmp_path / "journal.jsonl"
    with log.open("ab") as out:
        process = await start_adapter(
            config_journal, fake.base, stderr=out.fileno(), log_level="DEBUG", allow_users=[str(ANN)]
        )
    try:
        await _until(lambda: "connected as" in log.read_text())
        fake.user_message(ANN, "hello")
        fake.faults.add(Fault(status=502, body=HTML_502, route="getUpdates"))
        await _until(lambda: bool(_entries(config_journal, "thought")))
        await _until(lambda: fake.requests.get("getUpdates", 0) >= 3)
    finally:
        await _stop(process)
    text = log.read_text()
    assert "HTTP Request" not in text  # httpx's request lines (with the URL) are held back
    assert TEST_TOKEN not in text and TEST_TOKEN.split(":")[1] not in text


async def test_a_refused_token_stops_the_adapter_with_one_clear_message(tmp_path: Path, fake: FakeTelegram) -> None:
    other = "7000000002:AAAnotherTokenOfTheRightShape_abcdefg"
    process, log = await _run(tmp_path, fake, env={"TELEGRAM_BOT_TOKEN": other})
    await _stop(process)
    text = log.read_text()
    assert process.returncode == 1, text
    assert "Telegram refused the bot token" in text and "@BotFather" in text
    assert other not in text and "Traceback" not in text


async def test_a_malformed_token_is_refused_before_anything_connects(tmp_path: Path, fake: FakeTelegram) -> None:
    process, log = await _run(tmp_path, fake, env={"TELEGRAM_BOT_TOKEN": "not-a-token"})
    await _stop(process)
    text = log.read_text()
    assert process.returncode == 2 and "does not hold the Telegram bot token" in text, text
    assert "not-a-token" not in text and fake.requests == {}


async def test_long_polling_lives_through_5xx_cuts_and_429s(tmp_path: Path, fake: FakeTelegram) -> None:
    process, _ = await _run(tmp_path, fake, poll_timeout=1)
    journal = tmp_path / "journal.jsonl"
    try:
        fake.faults.add(
            Fault(status=502, body=HTML_502, route="getUpdates"),
            Fault(cut="before", route="getUpdates"),
            Fault(
                status=429,
                body={
                    "ok": False,
                    "error_code": 429,
                    "description": "Too Many Requests",
                    "parameters": {"retry_after": 1},
                },
                route="getUpdates",
            ),
            Fault(status=500, body={"ok": False, "error_code": 500, "description": "Internal"}, route="getUpdates"),
        )
        await _until(lambda: all(f.hits == 1 for f in fake.faults.active), 60)
        fake.user_message(ANN, "after a bad day")
        await _until(lambda: bool(_entries(journal, "thought")), 60)
        assert process.returncode is None
    finally:
        await _stop(process)
    assert [e["text"] for e in _entries(journal, "thought")] == ["after a bad day"]


async def test_an_allowed_senders_photo_comes_in_and_a_strangers_is_never_downloaded(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    process, _ = await _run(tmp_path, fake)
    journal = tmp_path / "journal.jsonl"
    try:
        theirs = fake.add_file(PNG)
        fake.user_message(STRANGER, "look", photo=theirs)
        await _until(lambda: any("not allowed" in m.text for m in fake.in_chat(STRANGER)))
        mine = fake.add_file(PNG)
        fake.user_message(ANN, "what is this?", photo=mine)
        await _until(lambda: bool(_entries(journal, "thought")))
    finally:
        await _stop(process)
    [thought] = _entries(journal, "thought")
    attachments = thought["attachments"]
    assert isinstance(attachments, list) and len(attachments) == 1
    assert Path(str(attachments[0]["url"]).removeprefix("file://")).read_bytes() == PNG
    assert fake.fetched.get(theirs, 0) == 0 and fake.requests.get("getFile", 0) == 1


async def test_an_image_past_the_limit_is_refused_with_a_notice_and_not_read_whole(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    process, _ = await _run(tmp_path, fake)
    journal = tmp_path / "journal.jsonl"
    try:
        big = fake.add_file(PNG + b"\x00" * (MAX_IMAGE_BYTES + 1))
        fake.declared[big] = 1000  # Telegram's declared size is not trusted
        fake.user_message(ANN, "a big one", photo=big)
        document = fake.add_file(b"%PDF-1.7")
        fake.user_message(ANN, "a pdf", document=(document, "application/pdf"))
        await _until(lambda: len(_entries(journal, "thought")) == 2)
    finally:
        await _stop(process)
    assert [t["attachments"] for t in _entries(journal, "thought")] == [[], []]
    notices = [m.text for m in fake.in_chat(ANN)]
    assert any("left out photo" in n and "larger than" in n for n in notices), notices
    assert any("only images" in n for n in notices), notices
    assert fake.fetched.get(document, 0) == 0


async def test_webhook_mode_takes_updates_posted_with_the_secret_and_refuses_others(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    secret = "a-webhook-secret-of-the-right-shape"
    url = f"http://127.0.0.1:{port}/telegram-updates"
    process, log = await _run(
        tmp_path,
        fake,
        env={"TELEGRAM_WEBHOOK_SECRET": secret},
        mode="webhook",
        webhook_url=url,
        webhook_port=port,
    )
    journal = tmp_path / "journal.jsonl"
    try:
        assert fake.webhook == {"url": url, "secret": secret}, log.read_text()
        async with aiohttp.ClientSession() as session:
            forged = {"update_id": 1, "message": {"message_id": 1, "date": 0, "chat": {"id": ANN, "type": "private"}}}
            for headers in ({}, {"X-Telegram-Bot-Api-Secret-Token": "a-guess-of-the-right-shape-000"}):
                async with session.post(url, json=forged, headers=headers) as response:
                    assert response.status == 403
        fake.user_message(ANN, "through the webhook")
        await _until(lambda: bool(_entries(journal, "thought")))
        await _until(lambda: not fake.updates)
    finally:
        await _stop(process)
    assert [e["text"] for e in _entries(journal, "thought")] == ["through the webhook"]
    assert fake.webhook_answers == [200] and fake.requests.get("getUpdates", 0) == 0
    assert secret not in log.read_text()


async def test_webhook_mode_without_its_url_or_secret_is_refused_at_start(tmp_path: Path, fake: FakeTelegram) -> None:
    process, log = await _run(tmp_path, fake, mode="webhook")
    await _stop(process)
    assert process.returncode == 2 and "needs webhook_url" in log.read_text(), log.read_text()
    process, log = await _run(tmp_path, fake, mode="webhook", webhook_url="https://bot.example.org/tg")
    await _stop(process)
    text = log.read_text()
    assert process.returncode == 2 and "the Telegram webhook secret is missing" in text, text
    assert fake.requests == {}
