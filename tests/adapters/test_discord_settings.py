"""``/project``, ``/model``, ``/mode`` on Discord (the real discord.py against the wire-level fake): slash commands
with an optional name and typed after a mention, each a ``settings`` entry with who asked; the daemon's
``settings`` answer is shown and ``/status`` shows what it carries."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from discord_fake import (
    CHANNEL_ID,
    GUILD_ID,
    TEST_TOKEN,
    FakeDiscord,
    FakeMessage,
    journal_entries,
    serve,
    start_adapter,
    stop,
    until,
)

from coven_codex.entries import ConversationSettings, StatusEntry
from coven_codex.journal import FileJournal

ALLOWED = "5000000000000000001"
CONVERSATION = f"discord:{GUILD_ID}/{CHANNEL_ID}/"


@pytest.fixture
async def served() -> AsyncIterator[tuple[FakeDiscord, int]]:
    state = FakeDiscord(token=TEST_TOKEN)
    async with serve(state) as port:
        yield state, port


def _response(fake: FakeDiscord, payload: dict[str, object]) -> FakeMessage | None:
    token = payload["token"]
    shown = [m for m in fake.in_channel(CHANNEL_ID) if m.interaction == token and m.content]
    return shown[0] if shown else None


async def _run(fake: FakeDiscord, user: str, name: str, options: dict[str, str] | None = None) -> str:
    payload = fake.slash_command(user, name, options)
    await fake.dispatch("INTERACTION_CREATE", payload)
    await until(lambda: _response(fake, payload) is not None)
    response = _response(fake, payload)
    assert response is not None
    return response.content


async def test_settings_slash_commands_append_settings_entries_and_status_shows_the_answer(
    served: tuple[FakeDiscord, int], tmp_path: Path
) -> None:
    fake, port = served
    journal = tmp_path / "chat.jsonl"
    process = await start_adapter(journal, port, allow_users=[ALLOWED])
    try:
        await until(fake.identified.is_set, 30)
        for name in ("project", "model", "mode"):
            command = next(c for c in fake.commands if c["name"] == name)
            assert [(o["name"], o["type"], o.get("required", False)) for o in command["options"]] == [
                ("name", 3, False)
            ]
        assert "project api sent" in await _run(fake, ALLOWED, "project", {"name": "api"})
        assert "model gpt-5.1-codex sent" in await _run(fake, ALLOWED, "model", {"name": "gpt-5.1-codex"})
        assert "asking the daemon for the mode" in await _run(fake, ALLOWED, "mode")
        asked = journal_entries(journal, "settings")
        assert [(e["conversation"], e["origin"], e["project"], e["model"], e["mode"]) for e in asked] == [
            (CONVERSATION, "discord", "api", None, None),
            (CONVERSATION, "discord", None, "gpt-5.1-codex", None),
            (CONVERSATION, "discord", None, None, None),
        ]
        assert all(e["sender"] for e in asked)
        # The daemon's answer: shown in the conversation, and what /status shows from then on.
        answer = StatusEntry(
            state="settings",
            conversation=CONVERSATION,
            settings=ConversationSettings(project="api", model="gpt-5.1-codex", mode="ask"),
            text="project: api; model: gpt-5.1-codex; mode: ask; the next message starts a new Codex thread in api",
        )
        writer = FileJournal(journal, durability="never")
        await writer.append(answer)
        await writer.aclose()
        await until(lambda: any("new Codex thread in api" in m.content for m in fake.in_channel(CHANNEL_ID)), 30)
        status = await _run(fake, ALLOWED, "status")
        assert "project: api; model: gpt-5.1-codex; mode: ask" in status, status
        assert len(journal_entries(journal, "settings")) == 3  # seen: /status asks the daemon no more
    finally:
        await stop(process)
