"""Attacks on the web page, against the real page server process: no token, a wrong token, the
token left in the URL, DNS rebinding (a foreign Host), cross-site WebSocket and POST (a foreign
Origin), hostile uploads, raw HTML in Markdown; and what the live channel appends to the journal."""

from __future__ import annotations

import asyncio
import json
import stat
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import websockets

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "web"))
from web_helpers import TOKEN, WebServer, cookie_header, png, request, socket_headers

from coven_codex.entries import (
    ApprovalEntry,
    ApprovalRequestEntry,
    CancelEntry,
    ResetEntry,
    ResponseEntry,
    StatusEntry,
    ThoughtEntry,
)
from coven_codex.journal import FileJournal, JournalRecord

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def web_server(tmp_path: Path) -> AsyncIterator[WebServer]:
    """A page server on ``tmp_path/journal.jsonl`` (started by the test)."""
    server = WebServer(tmp_path / "journal.jsonl", tmp_path)
    yield server
    if server.process is not None and server.process.returncode is None:
        await server.kill9()


async def entries(journal: Path) -> list[object]:
    handle = FileJournal(journal)
    try:
        return [item.entry for item in await handle.read() if isinstance(item, JournalRecord)]
    finally:
        await handle.aclose()


async def test_nothing_is_served_without_the_token(web_server: WebServer) -> None:
    await web_server.start()
    host = {"Host": f"127.0.0.1:{web_server.port}"}
    for path in ("/", "/static/app.js", "/static/style.css", "/attachments/x.png", "/live", "/nothing"):
        status, headers, body = await asyncio.to_thread(request, web_server.port, "GET", path, headers=host)
        assert status == 401, path
        assert b"access token" in body and headers["x-frame-options"] == "DENY"
    wrong = {**host, "Cookie": f"coven_web_{web_server.port}=not-the-token"}
    assert (await asyncio.to_thread(request, web_server.port, "GET", "/", headers=wrong))[0] == 401
    assert (await asyncio.to_thread(request, web_server.port, "GET", "/?token=wrong", headers=host))[0] == 401
    status, _, _ = await asyncio.to_thread(request, web_server.port, "POST", "/upload", headers=host, body=png())
    assert status == 401
    assert not (web_server.journal.parent / "journal.jsonl.attachments").exists()


async def test_the_token_in_the_url_becomes_a_strict_httponly_cookie(web_server: WebServer) -> None:
    url = await web_server.start()
    assert url == f"http://127.0.0.1:{web_server.port}/?token={TOKEN}"
    host = {"Host": f"127.0.0.1:{web_server.port}"}
    status, headers, _ = await asyncio.to_thread(request, web_server.port, "GET", f"/?token={TOKEN}", headers=host)
    assert status == 303 and headers["location"] == "/"  # the token does not stay in the address bar
    cookie = headers["set-cookie"]
    assert cookie.startswith(f"coven_web_{web_server.port}={TOKEN};")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    status, headers, body = await asyncio.to_thread(
        request, web_server.port, "GET", "/", headers=cookie_header(web_server)
    )
    assert status == 200 and b"/static/app.js" in body
    csp = headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
    assert headers["x-frame-options"] == "DENY" and headers["x-content-type-options"] == "nosniff"
    assert b"<script>" not in body and b"onclick" not in body  # no inline script in the page


async def test_a_foreign_host_name_is_refused_even_with_the_token(web_server: WebServer) -> None:
    """DNS rebinding: a site whose name now points at 127.0.0.1 still sends its own Host."""
    await web_server.start()
    rebound = {**cookie_header(web_server), "Host": f"attacker.example:{web_server.port}"}
    status, _, body = await asyncio.to_thread(request, web_server.port, "GET", "/", headers=rebound)
    assert status == 421 and b"host name" in body
    status, _, _ = await asyncio.to_thread(
        request, web_server.port, "GET", f"/?token={TOKEN}", headers={"Host": f"attacker.example:{web_server.port}"}
    )
    assert status == 421
    localhost = {**cookie_header(web_server), "Host": f"localhost:{web_server.port}"}
    assert (await asyncio.to_thread(request, web_server.port, "GET", "/", headers=localhost))[0] == 200


async def test_an_allowed_host_name_is_accepted_and_only_it(web_server: WebServer) -> None:
    await web_server.start("--allowed-host", "devbox.example")
    named = {**cookie_header(web_server), "Host": f"devbox.example:{web_server.port}"}
    assert (await asyncio.to_thread(request, web_server.port, "GET", "/", headers=named))[0] == 200
    other = {**named, "Host": f"devbox.example.evil:{web_server.port}"}
    assert (await asyncio.to_thread(request, web_server.port, "GET", "/", headers=other))[0] == 421


async def test_the_live_channel_checks_origin_and_token(web_server: WebServer) -> None:
    await web_server.start()
    uri = f"ws://127.0.0.1:{web_server.port}/live"
    good = socket_headers(web_server)
    for headers in (
        {**good, "Origin": "http://attacker.example"},
        {"Cookie": good["Cookie"]},
        {"Origin": good["Origin"]},
        {**good, "Cookie": f"coven_web_{web_server.port}=wrong-token-wrong-token"},
    ):
        with pytest.raises(websockets.InvalidStatus) as refused:
            async with websockets.connect(uri, origin=None, additional_headers=headers):
                pass
        assert refused.value.response.status_code == 403
    async with websockets.connect(uri, additional_headers=good) as socket:
        hello = json.loads(await asyncio.wait_for(socket.recv(), 10))
        assert hello == {"type": "hello", "sender": "tester", "conversations": []}


async def test_a_post_from_another_origin_is_refused(web_server: WebServer) -> None:
    await web_server.start()
    headers = {**cookie_header(web_server), "Origin": "http://attacker.example"}
    status, _, _ = await asyncio.to_thread(request, web_server.port, "POST", "/upload", headers=headers, body=png())
    assert status == 403


async def test_uploads_are_checked_and_stored_by_content(web_server: WebServer) -> None:
    await web_server.start()
    headers = cookie_header(web_server)
    image = png()
    status, _, body = await asyncio.to_thread(request, web_server.port, "POST", "/upload", headers=headers, body=image)
    assert status == 200, body
    answer = json.loads(body)
    folder = web_server.journal.parent / "journal.jsonl.attachments"
    stored = folder / answer["name"]
    assert stored.read_bytes() == image and answer["url"] == f"/attachments/{answer['name']}"
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600 and stat.S_IMODE(folder.stat().st_mode) == 0o700
    status, got, served = await asyncio.to_thread(request, web_server.port, "GET", answer["url"], headers=headers)
    assert status == 200 and served == image and got["content-type"] == "image/png"
    status, _, body = await asyncio.to_thread(
        request, web_server.port, "POST", "/upload", headers=headers, body=b"<svg onload=alert(1)>"
    )
    assert status == 415 and b"PNG, JPEG, GIF and WebP" in body
    status, _, body = await asyncio.to_thread(
        request, web_server.port, "POST", "/upload", headers=headers, body=image + b"\0" * (10 * 1024 * 1024)
    )
    assert status == 413 and b"10 MiB" in body
    for path in ("/attachments/..%2Fjournal.jsonl", "/attachments/journal.jsonl", "/static/index.html"):
        assert (await asyncio.to_thread(request, web_server.port, "GET", path, headers=headers))[0] == 404
    assert sorted(p.name for p in folder.iterdir()) == [answer["name"]]


async def test_the_page_appends_thoughts_attachments_cancel_approval_and_reset(web_server: WebServer) -> None:
    await web_server.start()
    headers = cookie_header(web_server)
    _, _, body = await asyncio.to_thread(request, web_server.port, "POST", "/upload", headers=headers, body=png())
    name = json.loads(body)["name"]
    uri = f"ws://127.0.0.1:{web_server.port}/live"
    async with websockets.connect(uri, additional_headers=socket_headers(web_server)) as socket:
        await socket.recv()
        for message in (
            {"type": "thought", "conversation": "c", "text": "look", "attachments": [name]},
            {"type": "cancel", "conversation": "c"},
            {"type": "approval", "conversation": "c", "request_id": "r9", "decision": "deny"},
            {"type": "reset", "conversation": "c"},
        ):
            await socket.send(json.dumps(message))
        await socket.send(
            json.dumps({"type": "thought", "conversation": "c", "text": "x", "attachments": ["a" * 64 + ".png"]})
        )
        await socket.send(json.dumps({"type": "shell", "command": "rm -rf /"}))
        notices = []
        while len(notices) < 2:
            message = json.loads(await asyncio.wait_for(socket.recv(), 10))
            if message["type"] == "notice":
                notices.append(message["text"])
        assert "no longer stored" in notices[0]
        assert notices[1].startswith("message refused")
    written = await entries(web_server.journal)
    assert [type(e) for e in written] == [ThoughtEntry, CancelEntry, ApprovalEntry, ResetEntry]
    thought = written[0]
    assert isinstance(thought, ThoughtEntry) and thought.sender == "tester" and thought.attachments
    attachment = thought.attachments[0]
    assert attachment.url == (web_server.journal.parent / "journal.jsonl.attachments" / name).as_uri()
    assert attachment.media_type == "image/png" and attachment.name == name
    extra = attachment.model_extra or {}
    assert extra["size"] == len(png()) and extra["sha256"] == name.split(".")[0]
    assert written[3].kind == "reset" and written[3].conversation == "c"
    raw = json.loads(web_server.journal.read_text().splitlines()[0])
    assert raw["attachments"][0]["url"] == attachment.url


async def test_markdown_is_rendered_on_the_server_with_raw_html_escaped(web_server: WebServer) -> None:
    journal = FileJournal(web_server.journal)
    await journal.append(
        ResponseEntry(
            conversation="c",
            text="**hi** <img src=x onerror=alert(1)>\n\n[x](javascript:alert(1))\n\n```py\nprint(1)\n```",
        )
    )
    await journal.aclose()
    await web_server.start()
    async with websockets.connect(
        f"ws://127.0.0.1:{web_server.port}/live", additional_headers=socket_headers(web_server)
    ) as socket:
        await socket.recv()
        await socket.send(json.dumps({"type": "subscribe", "conversation": "c", "after": None}))
        while (message := json.loads(await asyncio.wait_for(socket.recv(), 10)))["type"] != "entries":
            pass
    html = message["entries"][0]["html"]
    assert "<strong>hi</strong>" in html and '<code class="language-py">print(1)' in html
    assert "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert 'href="javascript' not in html


async def test_slash_commands_in_the_composer_are_the_kits_commands(web_server: WebServer) -> None:
    journal = FileJournal(web_server.journal, durability="never")
    await journal.append(StatusEntry(conversation="c", state="turn_started"))
    await journal.append(ApprovalRequestEntry(conversation="c", request_id="req-1", action="rm -rf build"))
    await journal.append(ApprovalRequestEntry(conversation="c", request_id="req-2", action="ls"))
    await journal.aclose()
    await web_server.start()
    async with websockets.connect(
        f"ws://127.0.0.1:{web_server.port}/live", additional_headers=socket_headers(web_server)
    ) as socket:
        await socket.recv()

        async def say(text: str) -> str | None:
            await socket.send(json.dumps({"type": "thought", "conversation": "c", "text": text}))
            await socket.send(json.dumps({"type": "thought", "conversation": "c", "text": "/zzz"}))  # a fence
            notices: list[str] = []
            while not notices or not notices[-1].startswith("unknown command /zzz"):
                message = json.loads(await asyncio.wait_for(socket.recv(), 10))
                if message["type"] == "notice":
                    notices.append(message["text"])
            return notices[0] if len(notices) == 2 else None

        assert await say("/status") == (
            "running; queued messages: 0; thread: none yet; last turn's token usage: not reported"
        )
        assert "/cancel" in (await say("/help") or "")
        assert await say("/approve") is None
        assert await say("/deny req-2") is None
        assert await say("/cancel") is None
        assert await say("/new") is None
    written = await entries(web_server.journal)
    answers = [e for e in written if isinstance(e, ApprovalEntry)]
    assert [(a.request_id, a.decision) for a in answers] == [("req-1", "approve"), ("req-2", "deny")]
    assert [e.kind for e in written[3:]] == ["approval", "approval", "cancel", "reset"]
    assert not [e for e in written if isinstance(e, ThoughtEntry)]  # commands are not thoughts
