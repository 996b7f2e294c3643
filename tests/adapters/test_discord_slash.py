"""Slash commands on Discord: registered through discord.py's CommandTree, run from INTERACTION_CREATE."""

from __future__ import annotations

import asyncio
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

ALLOWED = "5000000000000000001"
ADMIN = "5000000000000000002"
STRANGER = "5000000000000000009"
CONVERSATION = f"discord:{GUILD_ID}/{CHANNEL_ID}/"


@pytest.fixture
async def served() -> AsyncIterator[tuple[FakeDiscord, int]]:
    state = FakeDiscord(token=TEST_TOKEN)
    async with serve(state) as port:
        yield state, port


def _response(fake: FakeDiscord, payload: dict[str, object]) -> FakeMessage | None:
    """The response message of the interaction ``payload`` (its deferred message, once edited)."""
    token = payload["token"]
    shown = [m for m in fake.in_channel(CHANNEL_ID) if m.interaction == token and m.content]
    return shown[0] if shown else None


async def _run(fake: FakeDiscord, user: str, name: str, options: dict[str, str | int] | None = None) -> str:
    """Run ``/name`` as ``user``; the text of its response once shown."""
    payload = fake.slash_command(user, name, options)
    await fake.dispatch("INTERACTION_CREATE", payload)
    await until(lambda: _response(fake, payload) is not None)
    response = _response(fake, payload)
    assert response is not None
    return response.content


async def test_the_slash_commands_are_registered_and_codex_sends_the_prompt(
    served: tuple[FakeDiscord, int], tmp_path: Path
) -> None:
    fake, port = served
    journal = tmp_path / "chat.jsonl"
    process = await start_adapter(journal, port, allow_users=[ALLOWED])
    try:
        await until(fake.identified.is_set, 30)
        registered = sorted(command["name"] for command in fake.commands)
        assert registered == ["cancel", "codex", "history", "list", "mode", "model", "new", "project", "status"]
        codex = next(command for command in fake.commands if command["name"] == "codex")
        options = [(o["name"], o["type"], o["required"]) for o in codex["options"]]
        assert options == [("prompt", 3, True), ("image", 11, False)]
        shown = await _run(fake, ALLOWED, "codex", {"prompt": "what is 6 x 7?"})
        assert shown == "> what is 6 x 7?"
        thoughts = journal_entries(journal, "thought")
        assert [(t["text"], t["conversation"]) for t in thoughts] == [("what is 6 x 7?", CONVERSATION)]
        deferred = [i for i in fake.interactions if i["type"] == 5]
        assert len(deferred) == 1
    finally:
        await stop(process)


async def test_access_control_applies_to_slash_commands(served: tuple[FakeDiscord, int], tmp_path: Path) -> None:
    fake, port = served
    journal = tmp_path / "chat.jsonl"
    process = await start_adapter(journal, port, allow_users=[ALLOWED, ADMIN], admins=[ADMIN])
    try:
        await until(fake.identified.is_set, 30)
        refused = await _run(fake, STRANGER, "codex", {"prompt": "let me in"})
        assert "not allowed" in refused and STRANGER in refused
        assert "not allowed" in await _run(fake, STRANGER, "status")
        assert "Only an admin" in await _run(fake, ALLOWED, "new")
        assert journal_entries(journal, "thought") == []
        assert journal_entries(journal, "reset") == []
    finally:
        await stop(process)


async def test_new_appends_a_reset_and_status_and_cancel_answer(
    served: tuple[FakeDiscord, int], tmp_path: Path
) -> None:
    fake, port = served
    journal = tmp_path / "chat.jsonl"
    process = await start_adapter(journal, port, allow_users=[ADMIN], admins=[ADMIN])
    try:
        await until(fake.identified.is_set, 30)
        assert "new session" in await _run(fake, ADMIN, "new")
        resets = journal_entries(journal, "reset")
        assert [(r["conversation"], r["origin"]) for r in resets] == [(CONVERSATION, "discord")]
        assert (await _run(fake, ADMIN, "status")).startswith("idle; queued messages: 0")
        assert "cancel sent" in await _run(fake, ADMIN, "cancel")
        assert [c["conversation"] for c in journal_entries(journal, "cancel")] == [CONVERSATION]
        assert not [m for m in fake.in_channel(CHANNEL_ID) if not m.interaction]  # every answer was a response
    finally:
        await stop(process)


async def test_a_command_acknowledged_too_late_is_still_answered_in_the_channel(
    served: tuple[FakeDiscord, int], tmp_path: Path
) -> None:
    fake, port = served
    journal = tmp_path / "chat.jsonl"
    process = await start_adapter(journal, port, allow_users=[ADMIN], admins=[ADMIN], stderr=asyncio.subprocess.PIPE)
    try:
        await until(fake.identified.is_set, 30)
        payload = fake.slash_command(ADMIN, "new")
        fake.expired.add(str(payload["token"]))
        await fake.dispatch("INTERACTION_CREATE", payload)
        await until(lambda: any("new session" in m.content for m in fake.in_channel(CHANNEL_ID)))
        assert [r["conversation"] for r in journal_entries(journal, "reset")] == [CONVERSATION]
    finally:
        await stop(process)
    assert process.stderr is not None
    log = (await process.stderr.read()).decode()
    assert "could not be acknowledged" in log and "Traceback" not in log


PNG = (
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"
    b"\x00\x00\x00\rIDATx\x9cc\xf8\xff\xff?\x00\x05\xfe\x02\xfe\xa7V\x81\x1d\x00\x00\x00\x00IEND\xaeB`\x82"
)


async def test_codex_with_an_image_sends_it_as_image_input(served: tuple[FakeDiscord, int], tmp_path: Path) -> None:
    fake, port = served
    journal = tmp_path / "chat.jsonl"
    process = await start_adapter(journal, port, allow_users=[ALLOWED])
    try:
        await until(fake.identified.is_set, 30)
        image = fake.attachment(f"http://127.0.0.1:{port}", "screen.png", PNG)
        payload = fake.slash_command(ALLOWED, "codex", {"prompt": "what is on screen?"}, files={"image": image})
        await fake.dispatch("INTERACTION_CREATE", payload)
        await until(lambda: len(journal_entries(journal, "thought")) == 1)
        thought = journal_entries(journal, "thought")[0]
        assert thought["text"] == "what is on screen?"
        assert [a["media_type"] for a in thought["attachments"]] == ["image/png"]
        stored = Path(str(thought["attachments"][0]["url"]).removeprefix("file://"))
        assert stored.read_bytes() == PNG
    finally:
        await stop(process)


async def test_list_and_history_answer_as_slash_commands(served: tuple[FakeDiscord, int], tmp_path: Path) -> None:
    fake, port = served
    journal = tmp_path / "chat.jsonl"
    process = await start_adapter(journal, port, allow_users=[ALLOWED])
    try:
        await until(fake.identified.is_set, 30)
        await _run(fake, ALLOWED, "codex", {"prompt": "what is 6 x 7?"})
        history = await _run(fake, ALLOWED, "history", {"count": 3})
        assert history.startswith("the last 1 exchange here (asked for 3)") and "what is 6 x 7?" in history, history
        listed = await _run(fake, ALLOWED, "list")
        # where it lives: the channel as a Discord link
        assert listed.splitlines()[1].endswith(f"· <#{CHANNEL_ID}> · user001 ({ALLOWED}): what is 6 x 7?"), listed
        assert "not allowed" in await _run(fake, STRANGER, "list")
    finally:
        await stop(process)
