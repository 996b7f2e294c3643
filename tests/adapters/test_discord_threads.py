"""Per-channel choice on Discord: a new thread per request, or the channel itself."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from discord_fake import (
    CHANNEL_ID,
    GUILD_ID,
    TEST_TOKEN,
    FakeDiscord,
    journal_entries,
    serve,
    start_adapter,
    stop,
    until,
)

from coven_codex.entries import ResponseEntry
from coven_codex.journal import FileJournal

ALLOWED = "5000000000000000001"
STRANGER = "5000000000000000009"


@pytest.fixture
async def served() -> AsyncIterator[tuple[FakeDiscord, int]]:
    state = FakeDiscord(token=TEST_TOKEN)
    async with serve(state) as port:
        yield state, port


async def _append(journal: Path, entry: ResponseEntry) -> None:
    writer = FileJournal(journal, durability="never")
    try:
        await writer.append(entry)
    finally:
        await writer.aclose()


async def test_a_mention_starts_a_thread_that_is_the_conversation(
    served: tuple[FakeDiscord, int], tmp_path: Path
) -> None:
    fake, port = served
    journal = tmp_path / "chat.jsonl"
    process = await start_adapter(journal, port, allow_users=[ALLOWED], thread_channels=[CHANNEL_ID])
    try:
        await until(fake.identified.is_set, 30)
        request = fake.user_message(ALLOWED, "why is the   build red?")
        await fake.dispatch("MESSAGE_CREATE", request)
        await until(lambda: len(journal_entries(journal, "thought")) == 1)
        thread = request["id"]
        assert list(fake.threads) == [thread]
        assert fake.threads[thread]["parent_id"] == CHANNEL_ID
        assert fake.threads[thread]["name"] == "why is the build red?"
        conversation = f"discord:{GUILD_ID}/{CHANNEL_ID}/{thread}"
        assert journal_entries(journal, "thought")[0]["conversation"] == conversation

        # The same message delivered again (a Gateway resume): Discord refuses a second thread on
        # it, and the message is not a second thought.
        await fake.dispatch("MESSAGE_CREATE", request)
        await until(lambda: fake.thread_starts == 2)
        # In the thread, a message without a mention goes to Codex, in the same conversation.
        follow_up = fake.user_message(ALLOWED, "it is the linter", mention=False, channel=thread)
        await fake.dispatch("MESSAGE_CREATE", follow_up)
        await until(lambda: any(t["text"] == "it is the linter" for t in journal_entries(journal, "thought")))
        thoughts = journal_entries(journal, "thought")
        assert [(t["text"], t["conversation"]) for t in thoughts] == [
            ("why is the   build red?", conversation),
            ("it is the linter", conversation),
        ]
        assert list(fake.threads) == [thread]

        await _append(journal, ResponseEntry(text="fixed in the thread", conversation=conversation))
        await until(lambda: any("fixed in the thread" in m.content for m in fake.in_channel(thread)))
        assert fake.in_channel(CHANNEL_ID) == []
    finally:
        await stop(process)


async def test_a_channel_not_listed_is_the_conversation_itself(served: tuple[FakeDiscord, int], tmp_path: Path) -> None:
    fake, port = served
    journal = tmp_path / "chat.jsonl"
    process = await start_adapter(journal, port, allow_users=[ALLOWED])
    try:
        await until(fake.identified.is_set, 30)
        await fake.dispatch("MESSAGE_CREATE", fake.user_message(ALLOWED, "hello"))
        await fake.dispatch("MESSAGE_CREATE", fake.user_message(ALLOWED, "not for the bot", mention=False))
        await fake.dispatch("MESSAGE_CREATE", fake.user_message(ALLOWED, "again"))
        await until(lambda: len(journal_entries(journal, "thought")) == 2)
        conversation = f"discord:{GUILD_ID}/{CHANNEL_ID}/"
        assert [t["conversation"] for t in journal_entries(journal, "thought")] == [conversation] * 2
        assert fake.threads == {}
    finally:
        await stop(process)


async def test_a_per_user_channel_gives_each_user_a_session(served: tuple[FakeDiscord, int], tmp_path: Path) -> None:
    fake, port = served
    other = "5000000000000000003"
    journal = tmp_path / "chat.jsonl"
    process = await start_adapter(journal, port, allow_users=[ALLOWED, other], per_user_channels=[CHANNEL_ID])
    try:
        await until(fake.identified.is_set, 30)
        await fake.dispatch("MESSAGE_CREATE", fake.user_message(ALLOWED, "mine"))
        await fake.dispatch("MESSAGE_CREATE", fake.user_message(other, "theirs"))
        await until(lambda: len(journal_entries(journal, "thought")) == 2)
        conversations = {t["text"]: t["conversation"] for t in journal_entries(journal, "thought")}
        channel = f"discord:{GUILD_ID}/{CHANNEL_ID}/"
        assert conversations == {"mine": f"{channel}@{ALLOWED}", "theirs": f"{channel}@{other}"}
    finally:
        await stop(process)


async def test_a_stranger_starts_no_thread(served: tuple[FakeDiscord, int], tmp_path: Path) -> None:
    fake, port = served
    journal = tmp_path / "chat.jsonl"
    process = await start_adapter(journal, port, allow_users=[ALLOWED], thread_channels=[CHANNEL_ID])
    try:
        await until(fake.identified.is_set, 30)
        await fake.dispatch("MESSAGE_CREATE", fake.user_message(STRANGER, "make me a thread"))
        await until(lambda: any("not allowed" in m.content for m in fake.in_channel(CHANNEL_ID)))
        assert fake.thread_starts == 0 and fake.threads == {}
        assert journal_entries(journal, "thought") == []
    finally:
        await stop(process)


async def test_codex_slash_command_starts_its_thread_on_the_response(
    served: tuple[FakeDiscord, int], tmp_path: Path
) -> None:
    fake, port = served
    journal = tmp_path / "chat.jsonl"
    process = await start_adapter(journal, port, allow_users=[ALLOWED], admins=[ALLOWED], thread_channels=[CHANNEL_ID])
    try:
        await until(fake.identified.is_set, 30)
        payload = fake.slash_command(ALLOWED, "codex", {"prompt": "lint the repo"})
        await fake.dispatch("INTERACTION_CREATE", payload)
        await until(lambda: len(journal_entries(journal, "thought")) == 1)
        response = next(m for m in fake.in_channel(CHANNEL_ID) if m.interaction == payload["token"])
        assert list(fake.threads) == [response.id] and fake.threads[response.id]["name"] == "lint the repo"
        thought = journal_entries(journal, "thought")[0]
        assert (thought["text"], thought["conversation"]) == (
            "lint the repo",
            f"discord:{GUILD_ID}/{CHANNEL_ID}/{response.id}",
        )
        await until(lambda: response.content == "> lint the repo")
        # Inside the thread, /new resets the thread's conversation and answers there.
        reset = fake.slash_command(ALLOWED, "new", channel=response.id)
        await fake.dispatch("INTERACTION_CREATE", reset)
        await until(lambda: len(journal_entries(journal, "reset")) == 1)
        assert journal_entries(journal, "reset")[0]["conversation"] == thought["conversation"]
        await until(lambda: any(m.interaction == reset["token"] and m.content for m in fake.in_channel(response.id)))
    finally:
        await stop(process)
