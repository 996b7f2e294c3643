"""Files out on the web page: a ``file`` entry is a download link, and the file is served only with the
live channel's session (the page's token check), as an attachment, only from the journal's
``attachments/out/`` folder."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

from web_helpers import WebServer, chromium, live, open_page, page_headers, request

from coven_codex.adapters.web.render import wire_entry
from coven_codex.attachments import OUT_FOLDER, uploads_dir
from coven_codex.attachments.store import write_stored
from coven_codex.entries import Attachment, FileEntry
from coven_codex.journal import FileJournal

REPORT = b"%PDF-1.7\n" + bytes(range(256)) * 8


def stored_report(journal: Path) -> Path:
    path = uploads_dir(journal) / OUT_FOLDER / f"{hashlib.sha256(REPORT).hexdigest()}.pdf"
    write_stored(path, REPORT)
    return path


def test_a_file_entry_is_a_download_link_and_a_forged_one_is_none(tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    stored = stored_report(journal)
    sent = FileEntry(
        id="f1", text="the report", attachment=Attachment(url=stored.as_uri(), name="weekly report.pdf", size=9)
    )
    wire = wire_entry(sent, 0, 1, uploads_dir(journal))
    assert wire.file is not None and wire.file.name == "weekly report.pdf" and wire.file.size == 9
    assert wire.file.url == f"/files/{stored.name}?name=weekly%20report.pdf"
    assert "the report" in wire.text
    forged = FileEntry(id="f2", attachment=Attachment(url=(tmp_path / "secret.pdf").as_uri(), name="secret.pdf"))
    assert wire_entry(forged, 1, 2, uploads_dir(journal)).file is None


async def test_a_sent_file_is_served_only_with_the_session_as_a_download(web_server: WebServer) -> None:
    stored = stored_report(web_server.journal)
    await web_server.start()
    url = f"/files/{stored.name}?name=report.pdf"
    status, _, _ = await asyncio.to_thread(request, web_server.port, "GET", url, headers=page_headers(web_server))
    assert status == 401
    async with live(web_server) as (_, hello):
        headers = page_headers(web_server, hello["session"])
        status, got, body = await asyncio.to_thread(request, web_server.port, "GET", url, headers=headers)
        assert status == 200 and body == REPORT and got["content-type"] == "application/pdf"
        assert got["content-disposition"] == 'attachment; filename="report.pdf"'
        for path in (f"/files/..%2F{stored.name}", "/files/journal.jsonl", f"/files/{'0' * 64}.pdf"):
            assert (await asyncio.to_thread(request, web_server.port, "GET", path, headers=headers))[0] == 404


async def test_in_chromium_the_file_entry_s_link_downloads_the_file(
    web_server: WebServer, tmp_path: Path, chromium_path: str
) -> None:
    stored = stored_report(web_server.journal)
    journal = FileJournal(web_server.journal, durability="never")
    url = await web_server.start()
    errors: list[str] = []
    try:
        async with chromium(tmp_path / "profile") as browser:
            page = await open_page(browser, url + "#c=room", errors)
            attachment = Attachment(url=stored.as_uri(), name="report.pdf", size=len(REPORT))
            await journal.append(FileEntry(conversation="room", text="the weekly report", attachment=attachment))
            link = await page.wait_for_selector(".msg.file a.download")
            assert link is not None and await link.text_content() == f"download report.pdf ({len(REPORT)} bytes)"
            async with page.expect_download() as waiting:
                await link.click()
            download = await waiting.value
            assert download.suggested_filename == "report.pdf"
            assert Path(await download.path()).read_bytes() == REPORT
            assert errors == []
    finally:
        await journal.aclose()
