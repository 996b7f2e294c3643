"""Attacks on the chat's settings commands: a stranger cannot choose a conversation's project, model or mode
(Discord slash commands and typed commands after a mention, the real discord.py against the wire-level fake);
nothing of theirs reaches the journal."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "adapters"))

from discord_fake import (
    CHANNEL_ID,
    TEST_TOKEN,
    FakeDiscord,
    journal_entries,
    serve,
    start_adapter,
    stop,
    until,
)

ALLOWED = "5000000000000000001"
STRANGER = "5000000000000000009"


@pytest.fixture
async def served() -> AsyncIterator[tuple[FakeDiscord, int]]:
    state = FakeDiscord(token=TEST_TOKEN)
    async with serve(state) as port:
        yield state, port


async def test_a_stranger_cannot_change_a_conversation_s_settings(
    served: tuple[FakeDiscord, int], tmp_path: Path
) -> None:
    fake, port = served
    journal = tmp_path / "chat.jsonl"
    process = await start_adapter(journal, port, allow_users=[ALLOWED])
    try:
        await until(fake.identified.is_set, 30)
        for name, value in (("project", "secrets"), ("model", "expensive-model"), ("mode", "auto")):
            payload = fake.slash_command(STRANGER, name, {"name": value})
            await fake.dispatch("INTERACTION_CREATE", payload)
            await until(
                lambda p=payload: any(
                    m.interaction == p["token"] and "not allowed" in m.content for m in fake.in_channel(CHANNEL_ID)
                )
            )
            await fake.dispatch("MESSAGE_CREATE", fake.user_message(STRANGER, f"/{name} {value}"))
        await until(lambda: sum("not allowed" in m.content for m in fake.in_channel(CHANNEL_ID)) >= 6, 30)
        # An allowed user's command after them goes through: the stranger's were refused, not merely slow.
        await fake.dispatch("MESSAGE_CREATE", fake.user_message(ALLOWED, "/model"))
        await until(lambda: len(journal_entries(journal, "settings")) == 1, 30)
        assert [e["model"] for e in journal_entries(journal, "settings")] == [None]
        assert journal_entries(journal, "thought") == []
    finally:
        await stop(process)
