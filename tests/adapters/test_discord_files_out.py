"""Files out on Discord: a ``file`` entry becomes a message with the file as its attachment (a multipart
create, ``payload_json`` and ``files[0]``), exactly once through the nonce, a refused one a notice.
The real ``coven-codex discord`` process against the fake Discord."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from bad_day import Fault
from discord_fake import CHANNEL_ID, GUILD_ID, FakeMessage, until
from discord_under_test import DiscordAdapter
from running import append, running

from coven_codex.attachments import uploads_dir
from coven_codex.attachments.files_out import OUT_FOLDER
from coven_codex.attachments.store import write_stored
from coven_codex.entries import Attachment, FileEntry, ResponseEntry

CONVERSATION = f"discord:{GUILD_ID}/{CHANNEL_ID}/"
POSTS = f"POST /api/v10/channels/{CHANNEL_ID}/messages"
LOG = b"line one\nline two\n" * 200


@pytest.fixture
async def discord(tmp_path: Path) -> AsyncIterator[DiscordAdapter]:
    async with running(DiscordAdapter(tmp_path)) as adapter:
        yield adapter


def file_entry(adapter: DiscordAdapter, data: bytes, name: str, caption: str) -> FileEntry:
    """A ``file`` entry as ``send_file`` writes it, its copy in the journal's attachments folder."""
    digest = hashlib.sha256(data).hexdigest()
    stored = uploads_dir(adapter.journal) / OUT_FOLDER / f"{digest}.txt"
    write_stored(stored, data)
    attachment = Attachment.model_validate(
        {"url": stored.as_uri(), "media_type": "text/plain", "name": name, "size": len(data), "sha256": digest}
    )
    return FileEntry(conversation=CONVERSATION, text=caption, attachment=attachment)


def with_files(adapter: DiscordAdapter) -> list[FakeMessage]:
    return [m for m in adapter.fake.in_channel(CHANNEL_ID) if m.files]


async def test_a_file_entry_is_a_message_with_the_file_attached(discord: DiscordAdapter) -> None:
    await append(discord.journal, file_entry(discord, LOG, "build.log", "the build log"))
    await until(lambda: bool(with_files(discord)))
    [message] = with_files(discord)
    assert message.files == [("build.log", LOG)]
    assert "the build log" in message.content and message.nonce is not None


async def test_an_upload_whose_answer_is_lost_is_found_by_its_nonce_not_sent_twice(discord: DiscordAdapter) -> None:
    discord.fake.faults.add(Fault(route=POSTS, text="the build log", cut="after"))
    await append(
        discord.journal,
        file_entry(discord, LOG, "build.log", "the build log"),
        ResponseEntry(conversation=CONVERSATION, text="after the file."),
    )
    await until(lambda: any("after the file." in m.content for m in discord.fake.in_channel(CHANNEL_ID)), 30)
    assert len(with_files(discord)) == 1


async def test_a_file_entry_naming_a_file_outside_the_attachments_folder_is_a_notice(
    discord: DiscordAdapter, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_bytes(LOG)
    forged = FileEntry(
        conversation=CONVERSATION,
        text="forged",
        attachment=Attachment(url=secret.as_uri(), media_type="text/plain", name="secret.txt"),
    )
    await append(discord.journal, forged, ResponseEntry(conversation=CONVERSATION, text="after the forgery."))
    await until(lambda: any("after the forgery." in m.content for m in discord.fake.in_channel(CHANNEL_ID)))
    notices = [m for m in discord.fake.in_channel(CHANNEL_ID) if "did not take a file" in m.content]
    assert len(notices) == 1 and "attachments folder" in notices[0].content
    assert with_files(discord) == []
