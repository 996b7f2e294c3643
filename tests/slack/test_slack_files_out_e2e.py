"""End to end, files out: the daemon with the real Codex CLI 0.169.0 and the scripted model, behind the
``coven-codex slack`` process. The model calls the built-in spell ``send_file``; the fake Slack receives
the file as a ``files_upload_v2`` upload in the conversation's thread, with the file's bytes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from agent_harness import AgentHarness, send_file_when_asked
from slack_fake import text_of
from slack_under_test import SlackAdapter

from coven_codex.entries import FileEntry
from coven_codex.testing.model_server import ScriptedModelServer

pytestmark = [pytest.mark.codex, pytest.mark.timeout(300)]

REPORT = b"%PDF-1.7\n" + bytes(range(256)) * 16 + b"\n%%EOF\n"


async def test_a_send_file_call_reaches_slack_as_an_upload_with_the_file_s_bytes(
    codex_bin_169: Path, harness_factory: Callable[[Path, ScriptedModelServer], AgentHarness]
) -> None:
    async with ScriptedModelServer(responder=send_file_when_asked("out/report.pdf", "the weekly report")) as server:
        h = harness_factory(codex_bin_169, server)
        (h.workspace / "out").mkdir(parents=True, exist_ok=True)
        (h.workspace / "out" / "report.pdf").write_bytes(REPORT)
        daemon = await h.start("--send-file", "on")  # (no spells of its own: "auto" would not serve it)
        slack = SlackAdapter(h.journal_path.parent)
        fake = slack.fake
        await slack.start()
        root = slack.roots["general"]
        try:
            await fake.mention("CGENERAL", "UANN", "send me the report", root)
            await fake.wait_for(lambda: bool(fake.uploaded()), timeout=120)
            [(message, data)] = fake.uploaded()
            assert data == REPORT
            assert message["thread_ts"] == root and message["files"][0]["name"] == "report.pdf"
            assert "the weekly report" in text_of(message)
            entries = await h.wait_for(
                lambda es: any(e.kind == "response" and "sent:" in e.text for e in es), what="the reply after the file"
            )
            files = [e for e in entries if isinstance(e, FileEntry)]
            assert len(files) == 1 and files[0].conversation == slack.conversation("general", "ann")
            assert files[0].thread_id and files[0].turn_id  # (Codex 0.169 says both: the entry id is per call)
        finally:
            await slack.close()
            assert await h.stop(daemon) == 0
