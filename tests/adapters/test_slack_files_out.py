"""Files out on Slack: a ``file`` entry becomes a ``files_upload_v2`` upload in the conversation's thread
(``files.getUploadURLExternal``, the bytes to the upload URL, ``files.completeUploadExternal``), exactly
once, a refused one a notice. The real ``coven-codex slack`` process against the fake Slack."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from running import append, running
from slack_fake import text_of
from slack_under_test import SlackAdapter

from coven_codex.attachments import uploads_dir
from coven_codex.attachments.files_out import OUT_FOLDER
from coven_codex.attachments.store import write_stored
from coven_codex.entries import Attachment, FileEntry, ResponseEntry

PDF = b"%PDF-1.7\n" + bytes(range(256)) * 40


@pytest.fixture
async def slack(tmp_path: Path) -> AsyncIterator[SlackAdapter]:
    adapter = SlackAdapter(tmp_path)
    async with running(adapter):
        yield adapter


def file_entry(adapter: SlackAdapter, conversation: str, data: bytes, name: str, caption: str) -> FileEntry:
    """A ``file`` entry as ``send_file`` writes it, its copy in the journal's attachments folder."""
    digest = hashlib.sha256(data).hexdigest()
    stored = uploads_dir(adapter.journal) / OUT_FOLDER / f"{digest}.pdf"
    write_stored(stored, data)
    attachment = Attachment.model_validate(
        {"url": stored.as_uri(), "media_type": "application/pdf", "name": name, "size": len(data), "sha256": digest}
    )
    return FileEntry(conversation=conversation, text=caption, attachment=attachment)


async def test_a_file_entry_is_uploaded_into_the_thread_with_its_bytes_and_caption(slack: SlackAdapter) -> None:
    conversation = slack.conversation("general", "ann")
    await append(slack.journal, file_entry(slack, conversation, PDF, "report.pdf", "the report"))
    await slack.fake.wait_for(lambda: bool(slack.fake.uploaded()))
    [(message, data)] = slack.fake.uploaded()
    assert data == PDF
    assert message["files"][0]["name"] == "report.pdf" and message["files"][0]["title"] == "report.pdf"
    assert message["thread_ts"] == slack.roots["general"] and message["channel"] == "CGENERAL"
    assert "the report" in message["text"]


async def test_an_upload_whose_answer_is_lost_is_found_not_uploaded_twice(slack: SlackAdapter) -> None:
    conversation = slack.conversation("general", "ann")
    slack.fake.drop_upload_answers = 1
    await append(
        slack.journal,
        file_entry(slack, conversation, PDF, "report.pdf", "lost answer"),
        ResponseEntry(conversation=conversation, text="after the file."),
    )
    await slack.fake.wait_for(lambda: any("after the file." in text_of(m) for m in slack.fake.bot_messages()))
    assert slack.fake.drop_upload_answers == 0
    assert len(slack.fake.uploaded()) == 1


async def test_a_refused_upload_becomes_one_notice_and_the_adapter_goes_on(slack: SlackAdapter) -> None:
    conversation = slack.conversation("general", "ann")
    slack.fake.refuse_uploads = "invalid_file_type"
    await append(
        slack.journal,
        file_entry(slack, conversation, PDF, "report.pdf", "refused"),
        ResponseEntry(conversation=conversation, text="after the refusal."),
    )
    await slack.fake.wait_for(lambda: any("after the refusal." in text_of(m) for m in slack.fake.bot_messages()))
    notices = [m for m in slack.fake.bot_messages() if "did not take a file" in text_of(m)]
    assert len(notices) == 1 and "invalid_file_type" in text_of(notices[0])
    assert slack.fake.uploaded() == []


async def test_a_file_entry_naming_a_file_outside_the_attachments_folder_is_not_uploaded(
    slack: SlackAdapter, tmp_path: Path
) -> None:
    conversation = slack.conversation("general", "ann")
    secret = tmp_path / "secret.pdf"
    secret.write_bytes(PDF)
    forged = FileEntry(
        conversation=conversation,
        text="forged",
        attachment=Attachment(url=secret.as_uri(), media_type="application/pdf", name="secret.pdf"),
    )
    await append(slack.journal, forged, ResponseEntry(conversation=conversation, text="after the forgery."))
    await slack.fake.wait_for(lambda: any("after the forgery." in text_of(m) for m in slack.fake.bot_messages()))
    notices = [m for m in slack.fake.bot_messages() if "did not take a file" in text_of(m)]
    assert len(notices) == 1 and "attachments folder" in text_of(notices[0])
    assert slack.fake.uploaded() == [] and slack.fake.uploads == {}
