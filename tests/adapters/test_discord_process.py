"""``coven-codex discord`` as a process of its own, against the local fake of Discord."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from aiohttp import web
from discord_fake import CHANNEL_ID, GUILD_ID, TEST_TOKEN, FakeDiscord, start_adapter, stop

from coven_codex.entries import ApprovalRequestEntry, DeltaEntry, ResponseEntry, StatusEntry
from coven_codex.journal import FileJournal

TOKEN = TEST_TOKEN
ALLOWED = "5000000000000000001"
STRANGER = "5000000000000000009"


@pytest.fixture
async def served() -> AsyncIterator[tuple[FakeDiscord, int]]:
    state = FakeDiscord(token=TOKEN)
    runner = web.AppRunner(state.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield state, runner.addresses[0][1]
    await runner.cleanup()


def _thoughts(journal: Path) -> list[dict[str, object]]:
    if not journal.exists():
        return []
    entries = [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]
    return [e for e in entries if e.get("kind") == "thought"]


async def _until(condition: Callable[[], bool], seconds: float = 20.0) -> None:
    async with asyncio.timeout(seconds):
        while not condition():
            await asyncio.sleep(0.05)


async def test_allowed_user_reaches_the_journal_and_a_stranger_is_refused(
    served: tuple[FakeDiscord, int], tmp_path: Path
) -> None:
    fake, port = served
    journal = tmp_path / "chat.jsonl"
    process = await start_adapter(journal, port, allow_users=[ALLOWED])
    try:
        async with asyncio.timeout(30):
            await fake.identified.wait()
        await fake.dispatch("MESSAGE_CREATE", fake.user_message(STRANGER, "let me in"))
        await _until(lambda: any(m.content for m in fake.in_channel(CHANNEL_ID)))
        assert _thoughts(journal) == []
        await fake.dispatch("MESSAGE_CREATE", fake.user_message(ALLOWED, "hello codex"))
        await _until(lambda: len(_thoughts(journal)) == 1)
        thought = _thoughts(journal)[0]
        assert thought["text"] == "hello codex"
        assert thought["conversation"] == f"discord:{GUILD_ID}/{CHANNEL_ID}/"
        refusals = [m.content for m in fake.in_channel(CHANNEL_ID)]
        assert len(refusals) == 1 and "not" in refusals[0].lower()
        assert not any("let me in" in json.dumps(e) for e in _thoughts(journal))
    finally:
        await stop(process)


async def test_a_missing_privileged_intent_is_a_clear_start_up_error(
    served: tuple[FakeDiscord, int], tmp_path: Path
) -> None:
    fake, port = served
    fake.close_code = 4014
    process = await start_adapter(tmp_path / "chat.jsonl", port, allow_users=[ALLOWED], stderr=asyncio.subprocess.PIPE)
    async with asyncio.timeout(30):
        _, stderr = await process.communicate()
    assert process.returncode == 1
    text = stderr.decode()
    assert "enable it under Bot > Privileged Gateway Intents" in text
    assert text.count("Privileged Gateway Intents") == 1
    assert "Traceback" not in text
    assert TOKEN not in text


def _entries(journal: Path, kind: str) -> list[dict[str, object]]:
    if not journal.exists():
        return []
    entries = [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]
    return [e for e in entries if e.get("kind") == kind]


async def test_an_approval_round_trips_through_buttons(served: tuple[FakeDiscord, int], tmp_path: Path) -> None:
    fake, port = served
    journal = tmp_path / "chat.jsonl"
    process = await start_adapter(journal, port, allow_users=[ALLOWED])
    try:
        async with asyncio.timeout(30):
            await fake.identified.wait()
        await fake.dispatch("MESSAGE_CREATE", fake.user_message(ALLOWED, "start"))
        await _until(lambda: len(_entries(journal, "thought")) == 1)
        conversation = f"discord:{GUILD_ID}/{CHANNEL_ID}/"
        journal_writer = FileJournal(journal, durability="never")
        try:
            await journal_writer.append(
                ApprovalRequestEntry(request_id="req-7", action="run rm -rf build", conversation=conversation)
            )
        finally:
            await journal_writer.aclose()

        def request_shown() -> bool:
            return any("req-7" in m.content and m.components for m in fake.in_channel(CHANNEL_ID))

        await _until(request_shown)
        shown = next(m for m in fake.in_channel(CHANNEL_ID) if "req-7" in m.content)
        actions = [c["custom_id"] for row in shown.components for c in row["components"]]
        assert "approve req-7" in actions and "deny req-7" in actions
        await fake.dispatch("INTERACTION_CREATE", fake.button_press(ALLOWED, shown.id, "approve req-7"))
        await _until(lambda: len(_entries(journal, "approval")) == 1)
        answer = _entries(journal, "approval")[0]
        assert (answer["request_id"], answer["decision"], answer["conversation"]) == ("req-7", "approve", conversation)
        assert fake.interactions and fake.interactions[0]["type"] == 6
    finally:
        await stop(process)


async def _adapter(journal: Path, port: int) -> asyncio.subprocess.Process:
    return await start_adapter(journal, port, allow_users=[ALLOWED])


@pytest.mark.slow
async def test_kill_9_while_200_entries_flow_posts_each_once(served: tuple[FakeDiscord, int], tmp_path: Path) -> None:
    fake, port = served
    fake.rate_limit_every = 7
    journal = tmp_path / "chat.jsonl"
    process = await _adapter(journal, port)
    try:
        async with asyncio.timeout(30):
            await fake.identified.wait()
        await fake.dispatch("MESSAGE_CREATE", fake.user_message(ALLOWED, "start"))
        await _until(lambda: len(_entries(journal, "thought")) == 1)
        conversation = f"discord:{GUILD_ID}/{CHANNEL_ID}/"
        writer = FileJournal(journal, durability="never")
        try:
            for i in range(200):
                await writer.append(ResponseEntry(text=f"reply {i:03d}", conversation=conversation))
        finally:
            await writer.aclose()
        await _until(lambda: len(fake.in_channel(CHANNEL_ID)) >= 60, 60)
        process.kill()
        await process.wait()
        assert len(fake.in_channel(CHANNEL_ID)) < 200, "the kill came after the last post"
        fake.identified.clear()
        process = await _adapter(journal, port)
        await _until(lambda: len(fake.in_channel(CHANNEL_ID)) >= 200, 120)
        await asyncio.sleep(1.0)
        texts = [m.content for m in fake.in_channel(CHANNEL_ID)]
        expected = [f"codex: reply {i:03d}" for i in range(200)]
        assert sorted(texts) == expected
        assert fake.rate_limited > 0
    finally:
        await stop(process)


PNG = (
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"
    b"\x00\x00\x00\rIDATx\x9cc\xf8\xff\xff?\x00\x05\xfe\x02\xfe\xa7V\x81\x1d\x00\x00\x00\x00IEND\xaeB`\x82"
)


async def test_an_image_becomes_a_thought_attachment(served: tuple[FakeDiscord, int], tmp_path: Path) -> None:
    fake, port = served
    journal = tmp_path / "chat.jsonl"
    process = await _adapter(journal, port)
    try:
        async with asyncio.timeout(30):
            await fake.identified.wait()
        image = fake.attachment(f"http://127.0.0.1:{port}", "shot.png", PNG)
        await fake.dispatch("MESSAGE_CREATE", fake.user_message(ALLOWED, "what is this", attachments=(image,)))
        await _until(lambda: len(_entries(journal, "thought")) == 1)
        thought = _entries(journal, "thought")[0]
        attachments = thought["attachments"]
        assert isinstance(attachments, list) and len(attachments) == 1
        stored = Path(str(attachments[0]["url"]).removeprefix("file://"))
        assert stored.parent == tmp_path / "chat.jsonl.attachments"
        assert stored.read_bytes() == PNG
        assert attachments[0]["media_type"] == "image/png"
    finally:
        await stop(process)


async def test_a_streamed_reply_is_one_message_edited_and_a_long_one_is_split(
    served: tuple[FakeDiscord, int], tmp_path: Path
) -> None:
    fake, port = served
    journal = tmp_path / "chat.jsonl"
    process = await _adapter(journal, port)
    try:
        async with asyncio.timeout(30):
            await fake.identified.wait()
        await fake.dispatch("MESSAGE_CREATE", fake.user_message(ALLOWED, "start"))
        await _until(lambda: len(_entries(journal, "thought")) == 1)
        conversation = f"discord:{GUILD_ID}/{CHANNEL_ID}/"
        writer = FileJournal(journal, durability="never")
        try:
            await writer.append(StatusEntry(state="turn_started", conversation=conversation))
            for chunk in ("The ans", "wer is ", "forty-"):
                await writer.append(DeltaEntry(text=chunk, item_id="item-1", conversation=conversation))
                await asyncio.sleep(0.1)
            await _until(lambda: any("The ans" in m.content for m in fake.in_channel(CHANNEL_ID)))
            await writer.append(DeltaEntry(text="two.", item_id="item-1", conversation=conversation))
            await writer.append(ResponseEntry(text="The answer is forty-two.", conversation=conversation))
            await writer.append(StatusEntry(state="turn_completed", conversation=conversation))
            await writer.append(ResponseEntry(text="word " * 900, conversation=conversation))
        finally:
            await writer.aclose()
        await _until(lambda: sum("word" in m.content for m in fake.in_channel(CHANNEL_ID)) >= 3)
        shown = fake.in_channel(CHANNEL_ID)
        assert [m.content for m in shown if "forty" in m.content] == ["codex: The answer is forty-two."]
        streamed = next(m for m in shown if "forty" in m.content)
        assert streamed.edits >= 1
        assert all(len(m.content) <= 2000 for m in shown)
        assert sum(m.content.count("word") for m in shown) == 900
    finally:
        await stop(process)


async def test_a_display_name_equal_to_an_allowed_id_is_not_let_in(
    served: tuple[FakeDiscord, int], tmp_path: Path
) -> None:
    fake, port = served
    journal = tmp_path / "chat.jsonl"
    process = await _adapter(journal, port)
    try:
        async with asyncio.timeout(30):
            await fake.identified.wait()
        await fake.dispatch("MESSAGE_CREATE", fake.user_message(STRANGER, "impersonating", name=ALLOWED))
        await _until(lambda: any("not allowed" in m.content for m in fake.in_channel(CHANNEL_ID)))
        await fake.dispatch("MESSAGE_CREATE", fake.user_message(ALLOWED, "the real one", name="Ann"))
        await _until(lambda: len(_entries(journal, "thought")) == 1)
        thought = _entries(journal, "thought")[0]
        assert (thought["text"], thought["sender"]) == ("the real one", f"Ann ({ALLOWED})")
    finally:
        await stop(process)


async def test_a_file_that_is_no_image_is_left_out_aloud_and_a_strangers_file_is_not_fetched(
    served: tuple[FakeDiscord, int], tmp_path: Path
) -> None:
    fake, port = served
    journal = tmp_path / "chat.jsonl"
    process = await _adapter(journal, port)
    try:
        async with asyncio.timeout(30):
            await fake.identified.wait()
        base = f"http://127.0.0.1:{port}"
        secret = fake.attachment(base, "stranger.png", PNG)
        await fake.dispatch("MESSAGE_CREATE", fake.user_message(STRANGER, "look", attachments=(secret,)))
        await _until(lambda: any("not allowed" in m.content for m in fake.in_channel(CHANNEL_ID)))
        notes = fake.attachment(base, "notes.txt", b"just text", content_type="text/plain")
        image = fake.attachment(base, "shot.png", PNG)
        await fake.dispatch("MESSAGE_CREATE", fake.user_message(ALLOWED, "see these", attachments=(notes, image)))
        await _until(lambda: len(_entries(journal, "thought")) == 1)
        thought = _entries(journal, "thought")[0]
        assert [a["media_type"] for a in thought["attachments"]] == ["image/png"]
        notices = [m.content for m in fake.in_channel(CHANNEL_ID) if "left out" in m.content]
        assert len(notices) == 1 and "notes.txt" in notices[0] and "shot.png" not in notices[0]
        assert fake.fetched["stranger.png"] == 0
        assert len(list((tmp_path / "chat.jsonl.attachments").iterdir())) == 1
    finally:
        await stop(process)
