"""End to end, an image Codex generates goes out: the daemon with the real Codex CLI 0.169.0 and the
scripted model, behind the ``coven-codex slack`` process. The model's answer holds an
``image_generation_call`` output item (the Responses API's shape: ``result`` is the image, base64);
Codex records it in its rollout, and the fake Slack receives the image as a ``files_upload_v2`` upload
in the conversation's thread, with its bytes, as a ``send_file`` call's file. An image over
``max_file_bytes`` is refused with one ``error`` entry, and nothing is uploaded."""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_harness import AgentHarness, user_prompts
from slack_fake import text_of
from slack_under_test import SlackAdapter

from coven_codex.attachments.generated import IMAGE_REFUSED_CODE
from coven_codex.entries import ActivityEntry, ErrorEntry, FileEntry, StatusEntry
from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.request_log import RecordedRequest
from coven_codex.testing.steps import OutputItem, Reply, TurnScript

pytestmark = [pytest.mark.codex, pytest.mark.timeout(300)]


def png(width: int, height: int) -> bytes:
    """A valid grey PNG of ``width`` x ``height`` pixels (incompressible rows: its size grows with them)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    rows = b"".join(b"\x00" + bytes((x * 7 + y * 13) % 256 for x in range(width)) for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows, 0)) + chunk(b"IEND", b"")


PICTURE = png(64, 64)
PROMPT = "a grey gradient, 64 pixels square"


def image_call(data: bytes) -> dict[str, str]:
    return {
        "type": "image_generation_call",
        "id": "ig_e2e1",
        "status": "completed",
        "revised_prompt": PROMPT,
        "result": base64.b64encode(data).decode(),
    }


def respond(request: RecordedRequest) -> TurnScript:
    prompts = user_prompts(request)
    if prompts and prompts[-1].startswith("draw"):
        return (OutputItem(image_call(PICTURE)), Reply("here is your picture"))
    return Reply("nothing to draw")


async def test_an_image_codex_generates_reaches_slack_as_an_upload_with_its_bytes(
    codex_bin_169: Path, harness_factory: Callable[[Path, ScriptedModelServer], AgentHarness]
) -> None:
    async with ScriptedModelServer(responder=respond) as server:
        h = harness_factory(codex_bin_169, server)
        daemon = await h.start()
        slack = SlackAdapter(h.journal_path.parent)
        fake = slack.fake
        await slack.start()
        root = slack.roots["general"]
        try:
            await fake.mention("CGENERAL", "UANN", "draw me a gradient", root)
            await fake.wait_for(lambda: bool(fake.uploaded()), timeout=120)
            [(message, data)] = fake.uploaded()
            assert data == PICTURE
            assert message["thread_ts"] == root and message["files"][0]["name"] == "ig_e2e1.png"
            assert PROMPT in text_of(message)
            entries = await h.wait_for(
                lambda es: any(isinstance(e, StatusEntry) and e.state == "turn_completed" for e in es),
                what="the turn's end",
            )
            [file] = [e for e in entries if isinstance(e, FileEntry)]
            assert file.attachment.media_type == "image/png" and file.turn_id and file.in_reply_to
            assert file.conversation == slack.conversation("general", "ann")
            assert [e.text for e in entries if isinstance(e, ActivityEntry)] == [f"generated an image: {PROMPT}"]
            assert not [e for e in entries if isinstance(e, ErrorEntry)]
        finally:
            await slack.close()
            assert await h.stop(daemon) == 0


async def test_an_image_codex_generates_over_max_file_bytes_is_one_error_and_no_upload(
    codex_bin_169: Path, harness_factory: Callable[[Path, ScriptedModelServer], AgentHarness]
) -> None:
    async with ScriptedModelServer(responder=respond) as server:
        h = harness_factory(codex_bin_169, server)
        daemon = await h.start("--max-file-bytes", str(len(PICTURE) - 1))
        try:
            await h.think("pictures", "draw me a gradient")
            entries = await h.wait_for(
                lambda es: any(e.kind == "response" and "picture" in e.text for e in es), what="the reply"
            )
            [error] = [e for e in entries if isinstance(e, ErrorEntry)]
            assert error.code == IMAGE_REFUSED_CODE and f"at most {len(PICTURE) - 1} bytes" in error.text
            assert error.conversation == "pictures" and error.in_reply_to is not None
            assert not [e for e in entries if isinstance(e, FileEntry)]
        finally:
            assert await h.stop(daemon) == 0
