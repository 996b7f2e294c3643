"""Attacks on the web page, against the real page server process: no token, a wrong token, the
token left in the URL, DNS rebinding (a foreign Host), cross-site WebSocket and POST (a foreign
Origin), hostile uploads, raw HTML in Markdown; and what the live channel appends to the journal."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import stat
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import websockets

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "web"))
from web_helpers import (
    TOKEN,
    OtherLocalServer,
    WebServer,
    chromium,
    live,
    live_uri,
    message_texts,
    open_page,
    page_headers,
    png,
    request,
)

from coven_codex.adapters.web.app import LOGIN_TIMEOUT, MAX_PENDING_LOGINS
from coven_codex.adapters.web.auth import Access, device_proof
from coven_codex.adapters.web.connections import HEADER_TIMEOUT
from coven_codex.attachments.store import MAX_IMAGE_BYTES, MAX_UNSENT_BYTES, MAX_UNSENT_IMAGES, ImageStore
from coven_codex.entries import (
    ApprovalEntry,
    ApprovalRequestEntry,
    CancelEntry,
    ResetEntry,
    ResponseEntry,
    SettingsEntry,
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


async def test_no_data_is_served_without_a_login(web_server: WebServer) -> None:
    await web_server.start()
    host = page_headers(web_server)
    for path in ("/attachments/x.png", "/nothing", "/static/index.html"):
        status, headers, body = await asyncio.to_thread(request, web_server.port, "GET", path, headers=host)
        assert status == 401, path
        assert b"live connection" in body and headers["x-frame-options"] == "DENY"
    wrong = page_headers(web_server, session="not-a-session")
    assert (await asyncio.to_thread(request, web_server.port, "GET", "/attachments/x.png", headers=wrong))[0] == 401
    status, _, body = await asyncio.to_thread(request, web_server.port, "GET", "/?token=wrong", headers=host)
    assert status == 401 and b"access token" in body
    for headers in (host, {**host, "Authorization": f"Bearer {TOKEN}"}):  # the token itself is no session
        status, _, _ = await asyncio.to_thread(request, web_server.port, "POST", "/upload", headers=headers, body=png())
        assert status == 401
    assert not (web_server.journal.parent / "journal.jsonl.attachments").exists()
    async with live(web_server) as (_, hello):  # a session is valid while its live channel is open
        session = hello["session"]
        good = page_headers(web_server, session)
        assert (await asyncio.to_thread(request, web_server.port, "POST", "/upload", headers=good, body=png()))[
            0
        ] == 200
    # The server learns of the close a moment after the client sent it: the session ends then (bounded).
    deadline = asyncio.get_running_loop().time() + 10
    while (await asyncio.to_thread(request, web_server.port, "GET", "/attachments/x.png", headers=good))[0] != 401:
        assert asyncio.get_running_loop().time() < deadline, "the session outlived its live channel"
        await asyncio.sleep(0.05)
    gone = await asyncio.to_thread(request, web_server.port, "POST", "/upload", headers=good, body=png())
    assert gone[0] == 401


async def test_the_page_itself_is_public_and_sets_no_cookie(web_server: WebServer) -> None:
    url = await web_server.start()
    assert url == f"http://127.0.0.1:{web_server.port}/?token={TOKEN}"
    for path in (f"/?token={TOKEN}", "/", "/static/app.js", "/static/style.css"):
        status, headers, _ = await asyncio.to_thread(
            request, web_server.port, "GET", path, headers={"Host": f"127.0.0.1:{web_server.port}"}
        )
        assert status == 200 and "set-cookie" not in headers, path
    status, headers, body = await asyncio.to_thread(
        request, web_server.port, "GET", "/", headers=page_headers(web_server)
    )
    assert status == 200 and b"/static/app.js" in body and TOKEN.encode() not in body
    csp = headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
    assert headers["x-frame-options"] == "DENY" and headers["x-content-type-options"] == "nosniff"
    assert b"<script>" not in body and b"onclick" not in body  # no inline script in the page


async def test_a_foreign_host_name_is_refused_even_with_a_session(web_server: WebServer) -> None:
    """DNS rebinding: a site whose name now points at 127.0.0.1 still sends its own Host."""
    await web_server.start()
    async with live(web_server) as (_, hello):
        session = page_headers(web_server, hello["session"])
        rebound = {**session, "Host": f"attacker.example:{web_server.port}"}
        for path in ("/", "/attachments/x.png"):
            status, _, body = await asyncio.to_thread(request, web_server.port, "GET", path, headers=rebound)
            assert status == 421 and b"host name" in body
        status, _, _ = await asyncio.to_thread(
            request, web_server.port, "GET", f"/?token={TOKEN}", headers={"Host": f"attacker.example:{web_server.port}"}
        )
        assert status == 421
        localhost = {**session, "Host": f"localhost:{web_server.port}"}
        assert (await asyncio.to_thread(request, web_server.port, "GET", "/attachments/x.png", headers=localhost))[
            0
        ] == 404
    with pytest.raises(websockets.InvalidStatus):
        async with websockets.connect(
            live_uri(web_server), origin=None, additional_headers={"Host": f"attacker.example:{web_server.port}"}
        ):
            pass


async def test_an_allowed_host_name_is_accepted_and_only_it(web_server: WebServer) -> None:
    await web_server.start("--allowed-host", "devbox.example")
    named = {**page_headers(web_server), "Host": f"devbox.example:{web_server.port}"}
    assert (await asyncio.to_thread(request, web_server.port, "GET", "/", headers=named))[0] == 200
    other = {**named, "Host": f"devbox.example.evil:{web_server.port}"}
    assert (await asyncio.to_thread(request, web_server.port, "GET", "/", headers=other))[0] == 421


async def test_the_live_channel_checks_origin_and_logs_in_first(web_server: WebServer) -> None:
    await web_server.start()
    uri = live_uri(web_server)
    for headers in ({"Origin": "http://attacker.example"}, {}):
        with pytest.raises(websockets.InvalidStatus) as refused:
            async with websockets.connect(uri, origin=None, additional_headers=headers):
                pass
        assert refused.value.response.status_code == 403
    own = {"Origin": f"http://127.0.0.1:{web_server.port}"}
    for answer in (
        {"type": "login", "token": "wrong-token-wrong-token"},
        {"type": "authenticate", "device": "d" * 24, "proof": "forged"},
        {"type": "subscribe", "conversation": "c", "after": None},  # anything else before the login
    ):
        async with websockets.connect(uri, origin=None, additional_headers=own) as socket:
            assert json.loads(await asyncio.wait_for(socket.recv(), 10))["type"] == "challenge"
            await socket.send(json.dumps(answer))
            refused_message = json.loads(await asyncio.wait_for(socket.recv(), 10))
            assert refused_message["type"] == "refused" and "coven-codex web" in refused_message["text"]
            with pytest.raises(websockets.ConnectionClosed):
                await asyncio.wait_for(socket.recv(), 10)
    async with live(web_server) as (_, hello):
        assert hello["sender"] == "tester" and hello["conversations"] == [] and hello["device"] is None
        assert len(hello["session"]) >= 40


async def test_a_device_key_logs_in_by_proof_and_only_for_its_token(web_server: WebServer) -> None:
    await web_server.start()
    uri = live_uri(web_server)
    own = {"Origin": f"http://127.0.0.1:{web_server.port}"}
    async with websockets.connect(uri, origin=None, additional_headers=own) as socket:
        await socket.recv()
        await socket.send(json.dumps({"type": "login", "token": TOKEN, "device": True}))
        device = json.loads(await asyncio.wait_for(socket.recv(), 10))["device"]
    secret = base64.urlsafe_b64decode(device["secret"] + "=" * (-len(device["secret"]) % 4))
    assert secret == Access.for_bind(TOKEN, "127.0.0.1", web_server.port).device_secret(device["id"])
    for attempt in range(2):
        async with websockets.connect(uri, origin=None, additional_headers=own) as socket:
            nonce = json.loads(await asyncio.wait_for(socket.recv(), 10))["nonce"]
            await socket.send(
                json.dumps({"type": "authenticate", "device": device["id"], "proof": device_proof(secret, nonce)})
            )
            assert json.loads(await asyncio.wait_for(socket.recv(), 10))["type"] == "hello", attempt
    stale: dict[str, str] = {}
    async with websockets.connect(uri, origin=None, additional_headers=own) as socket:  # a replayed proof fails
        nonce = json.loads(await asyncio.wait_for(socket.recv(), 10))["nonce"]
        stale = {"type": "authenticate", "device": device["id"], "proof": device_proof(secret, nonce + "x")}
        await socket.send(json.dumps(stale))
        assert json.loads(await asyncio.wait_for(socket.recv(), 10))["type"] == "refused"
    await web_server.stop()
    web_server.token = "another-token-0123456789abcdef"
    await web_server.start()
    async with websockets.connect(uri, origin=None, additional_headers=own) as socket:  # a new token: keys are void
        nonce = json.loads(await asyncio.wait_for(socket.recv(), 10))["nonce"]
        await socket.send(
            json.dumps({"type": "authenticate", "device": device["id"], "proof": device_proof(secret, nonce)})
        )
        refused = json.loads(await asyncio.wait_for(socket.recv(), 10))
        assert refused["type"] == "refused" and "another token" in refused["text"]


async def test_a_live_channel_that_never_logs_in_is_closed(web_server: WebServer) -> None:
    await web_server.start()
    async with websockets.connect(
        live_uri(web_server), origin=None, additional_headers={"Origin": f"http://127.0.0.1:{web_server.port}"}
    ) as socket:
        assert json.loads(await asyncio.wait_for(socket.recv(), 10))["type"] == "challenge"
        with pytest.raises(websockets.ConnectionClosed):
            await asyncio.wait_for(socket.recv(), LOGIN_TIMEOUT + 10)
        assert socket.close_code == 1008


async def test_a_post_from_another_origin_is_refused(web_server: WebServer) -> None:
    await web_server.start()
    async with live(web_server) as (_, hello):
        headers = {**page_headers(web_server, hello["session"]), "Origin": "http://attacker.example"}
        status, _, _ = await asyncio.to_thread(request, web_server.port, "POST", "/upload", headers=headers, body=png())
    assert status == 403


async def test_uploads_are_checked_and_stored_by_content(web_server: WebServer) -> None:
    await web_server.start()
    async with live(web_server) as (_, hello):
        await _uploads_are_checked(web_server, page_headers(web_server, hello["session"]))


async def _uploads_are_checked(web_server: WebServer, headers: dict[str, str]) -> None:
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
    assert sorted(p.name for p in folder.iterdir()) == [".unsent", answer["name"]]
    marker = folder / ".unsent" / answer["name"]  # not sent yet (uploads never sent are cleaned up)
    assert marker.read_bytes() == b"" and stat.S_IMODE(marker.stat().st_mode) == 0o600
    assert stat.S_IMODE(marker.parent.stat().st_mode) == 0o700


async def test_the_page_appends_thoughts_attachments_cancel_approval_and_reset(web_server: WebServer) -> None:
    await web_server.start()
    async with live(web_server) as (socket, hello):
        headers = page_headers(web_server, hello["session"])
        _, _, body = await asyncio.to_thread(request, web_server.port, "POST", "/upload", headers=headers, body=png())
        name = json.loads(body)["name"]
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
    async with live(web_server) as (socket, _):
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
    async with live(web_server) as (socket, _):

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
            "running; queued messages: 0; thread: none yet; settings: not seen here yet (the daemon says them next);"
            " last turn's token usage: not reported"
        )
        assert await say("/model gpt-5.1-codex") == "model gpt-5.1-codex sent; the daemon's answer follows"
        assert (await say("/project") or "").startswith("asking the daemon for the project")
        assert "/cancel" in (await say("/help") or "")
        assert await say("/approve") is None
        assert await say("/deny req-2") is None
        assert await say("/cancel") is None
        assert await say("/new") is None
    written = await entries(web_server.journal)
    answers = [e for e in written if isinstance(e, ApprovalEntry)]
    assert [(a.request_id, a.decision) for a in answers] == [("req-1", "approve"), ("req-2", "deny")]
    assert [e.kind for e in written[3:]] == [
        "settings",
        "settings",
        "settings",
        "approval",
        "approval",
        "cancel",
        "reset",
    ]
    asked = [e for e in written if isinstance(e, SettingsEntry)]
    assert [(e.sender, e.project, e.model) for e in asked] == [
        ("tester", None, None),
        ("tester", None, "gpt-5.1-codex"),
        ("tester", None, None),
    ]
    assert not [e for e in written if isinstance(e, ThoughtEntry)]  # commands are not thoughts


async def test_another_local_server_receives_no_credential_from_a_logged_in_browser(
    web_server: WebServer, tmp_path: Path
) -> None:
    """Cookies ignore ports: a login kept in one would go to every server on 127.0.0.1. The user
    logs in, clicks a link to another local server in a reply, and browses to it: that server
    gets nothing of the login. The page still works after a reload and in a new tab."""
    async with OtherLocalServer() as other:
        journal = FileJournal(web_server.journal, durability="never")
        link = f"http://127.0.0.1:{other.port}/from-a-link"
        await journal.append(ResponseEntry(conversation="c", text=f"have a look at [the other server]({link})"))
        await journal.aclose()
        url = await web_server.start()
        errors: list[str] = []
        async with chromium(tmp_path / "profile") as browser:
            page = await open_page(browser, url + "#c=c", errors)
            await page.wait_for_selector(".msg.response a")
            assert TOKEN not in page.url and await page.evaluate("document.cookie") == ""
            image = tmp_path / "picture.png"
            image.write_bytes(png(3, 3))
            await page.set_input_files("#file", str(image))  # an image: loaded with the session header
            await page.wait_for_function(
                "() => { const i = document.querySelector('#attachments img'); return i && i.naturalWidth === 3; }"
            )
            await page.fill("#input", "with a picture")
            await page.press("#input", "Enter")
            await page.wait_for_function(
                "() => { const i = document.querySelector('.msg.thought img.attachment');"
                " return i && i.naturalWidth === 3; }"
            )
            await page.click(".msg.response a")  # the user clicks the link in the reply
            await other.wait_for("/from-a-link")
            browsing = await browser.new_page()  # and browses to the other server
            await browsing.goto(f"http://127.0.0.1:{other.port}/browsed")
            await other.wait_for("/browsed")
            await browsing.close()
            for recorded in other.requests:
                names = {name.lower() for name, _ in recorded.headers}
                assert "cookie" not in names and "authorization" not in names, recorded
                assert TOKEN not in recorded.line and all(TOKEN not in value for _, value in recorded.headers), recorded
            # the login is kept for this origin only: a new tab and a reload work without the token
            second = await open_page(browser, f"{web_server.base}/#c=c", errors)
            await second.wait_for_function("() => document.querySelectorAll('#messages .msg').length === 2")
            await second.reload()
            await second.wait_for_function("() => document.getElementById('connection').textContent === 'connected'")
            await second.wait_for_function("() => document.querySelectorAll('#messages .msg').length === 2")
            assert await message_texts(second, "thought") == ["with a picture"]
            assert errors == []
        assert all(TOKEN not in r.line for r in other.requests) and len(other.requests) >= 2


async def test_a_foreign_cookie_on_127_0_0_1_does_not_lock_the_user_out(web_server: WebServer, tmp_path: Path) -> None:
    """Another local app sets cookies Python's SimpleCookie rejects (a name with ``@``, a value with a space)."""
    async with OtherLocalServer(cookies=("x@y=1; Path=/", "spaced=a b; Path=/")) as other:
        url = await web_server.start()
        errors: list[str] = []
        async with chromium(tmp_path / "profile") as browser:
            visit = await browser.new_page()
            await visit.goto(f"http://127.0.0.1:{other.port}/")
            kept = {c["name"]: c["value"] for c in await browser.cookies(f"http://127.0.0.1:{web_server.port}/")}
            assert kept == {"x@y": "1", "spaced": "a b"}  # Chromium sends these to every port of 127.0.0.1
            page = await open_page(browser, url + "#c=c", errors)
            await page.fill("#input", "still here")
            await page.press("#input", "Enter")
            await page.wait_for_selector(".msg.thought")
            await page.reload()
            await page.wait_for_function("() => document.getElementById('connection').textContent === 'connected'")
            await page.wait_for_selector(".msg.thought")
            assert errors == []


async def _half_open(port: int) -> asyncio.StreamWriter | None:
    """A connection that sends half a request's headers and nothing more (None: not accepted in 5 s)."""
    try:
        _reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
    except (TimeoutError, OSError):
        return None
    writer.write(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Slow: ".encode())
    return writer


async def test_slowloris_does_not_keep_a_real_client_out(web_server: WebServer) -> None:
    """1,100 half-open requests from this machine (the limit of open files at the usual 1024): the
    page and its live channel still answer a real client, and the server does not run out of files."""
    web_server.open_files = 1024
    await web_server.start()
    assert web_server.process is not None
    attackers: list[asyncio.StreamWriter] = []
    try:
        for _ in range(1100):
            writer = await _half_open(web_server.port)
            if writer is not None:
                attackers.append(writer)
        started = time.monotonic()
        status, _, body = await asyncio.to_thread(
            request, web_server.port, "GET", "/", headers=page_headers(web_server)
        )
        served_in = time.monotonic() - started
        assert status == 200 and b"/static/app.js" in body
        async with live(web_server) as (_, hello):
            assert hello["type"] == "hello"
        open_files = len(os.listdir(f"/proc/{web_server.process.pid}/fd"))
        print(
            f"1,100 half-open: {len(attackers)} connected; a real request served in {served_in:.3f} s; {open_files} fds"
        )
        assert open_files < 600, open_files
    finally:
        for writer in attackers:
            writer.close()
    assert "Too many open files" not in web_server.log()


async def test_a_request_whose_headers_never_end_is_closed(web_server: WebServer) -> None:
    await web_server.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", web_server.port)
    try:
        writer.write(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{web_server.port}\r\n".encode())
        started = time.monotonic()
        assert await asyncio.wait_for(reader.read(), HEADER_TIMEOUT + 20) == b""  # closed by the server
        assert time.monotonic() - started > HEADER_TIMEOUT - 1
    finally:
        writer.close()


def _distinct_png(number: int, size: int = 0) -> bytes:
    """A PNG unlike every other ``number`` (padded to ``size`` bytes when given)."""
    image = png(number % 50 + 1, number // 50 + 1)
    return image + b"\0" * max(0, size - len(image))


async def _upload(server: WebServer, headers: dict[str, str], data: bytes) -> tuple[int, dict[str, str]]:
    status, _, body = await asyncio.to_thread(request, server.port, "POST", "/upload", headers=headers, body=data)
    return status, json.loads(body)


async def _fence(socket: websockets.ClientConnection) -> list[str]:
    """Every notice until the answer to a command sent now: what was sent before is done."""
    await socket.send(json.dumps({"type": "thought", "conversation": "c", "text": "/zzz"}))
    notices: list[str] = []
    while not notices or not notices[-1].startswith("unknown command /zzz"):
        message = json.loads(await asyncio.wait_for(socket.recv(), 10))
        if message["type"] == "notice":
            notices.append(message["text"])
    return notices[:-1]


async def test_unsent_uploads_are_limited_in_number_until_a_thought_sends_them(web_server: WebServer) -> None:
    await web_server.start()
    async with live(web_server) as (socket, hello):
        headers = page_headers(web_server, hello["session"])
        names = []
        for number in range(MAX_UNSENT_IMAGES):
            status, answer = await _upload(web_server, headers, _distinct_png(number))
            assert status == 200, answer
            names.append(answer["name"])
        assert (await _upload(web_server, headers, _distinct_png(0)))[0] == 200  # the same image again: no more room
        status, answer = await _upload(web_server, headers, _distinct_png(MAX_UNSENT_IMAGES))
        assert status == 429
        assert f"{MAX_UNSENT_IMAGES} images" in answer["error"] and "not sent yet" in answer["error"]
        assert "Send the images you attached" in answer["error"] and "60 minutes" in answer["error"]
        await socket.send(
            json.dumps({"type": "thought", "conversation": "c", "text": "these", "attachments": names[:8]})
        )
        assert await _fence(socket) == []
        for number in range(MAX_UNSENT_IMAGES, MAX_UNSENT_IMAGES + 8):  # sent images make room
            assert (await _upload(web_server, headers, _distinct_png(number)))[0] == 200
        assert (await _upload(web_server, headers, _distinct_png(99)))[0] == 429
    folder = web_server.journal.parent / "journal.jsonl.attachments"
    assert len(list(folder.glob("*.png"))) == MAX_UNSENT_IMAGES + 8


async def test_unsent_uploads_are_limited_in_bytes(web_server: WebServer) -> None:
    await web_server.start()
    big = MAX_IMAGE_BYTES
    async with live(web_server) as (_, hello):
        headers = page_headers(web_server, hello["session"])
        for number in range(MAX_UNSENT_BYTES // big):
            status, answer = await _upload(web_server, headers, _distinct_png(number, big))
            assert status == 200, answer
        status, answer = await _upload(web_server, headers, _distinct_png(99, big))
        assert status == 429 and "100 MiB" in answer["error"]
        assert (await _upload(web_server, headers, _distinct_png(100)))[0] == 429  # full is full


async def test_unsent_uploads_are_deleted_after_their_age_unless_a_thought_attaches_them(
    web_server: WebServer,
) -> None:
    folder = web_server.journal.parent / "journal.jsonl.attachments"
    other_adapter = await ImageStore(folder).save(_distinct_png(1))  # as Slack stores an image, in a thought
    journal = FileJournal(web_server.journal, durability="never")
    await journal.append(
        ThoughtEntry(conversation="s", sender="bo", text="pic", attachments=[other_adapter.attachment()])
    )
    await journal.aclose()
    await web_server.start()
    async with live(web_server) as (socket, hello):
        headers = page_headers(web_server, hello["session"])
        names = {}
        for label, number in (("in a slack thought", 1), ("sent", 2), ("unsent", 3), ("recent", 4)):
            status, answer = await _upload(web_server, headers, _distinct_png(number))
            assert status == 200
            names[label] = answer["name"]
        assert names["in a slack thought"] == other_adapter.path.name
        await socket.send(
            json.dumps({"type": "thought", "conversation": "c", "text": "one", "attachments": [names["sent"]]})
        )
        assert await _fence(socket) == []
        two_hours_ago = time.time() - 2 * 3600  # time passes: everything but "recent" is old
        for label in ("in a slack thought", "sent", "unsent"):
            for path in folder.rglob(names[label]):
                os.utime(path, (two_hours_ago, two_hours_ago))
        assert (await _upload(web_server, headers, _distinct_png(5)))[0] == 200  # an upload sweeps first
        kept = {path.name for path in folder.glob("*.png")}
        assert names["unsent"] not in kept
        assert {names["in a slack thought"], names["sent"], names["recent"]} <= kept
        status, _, _ = await asyncio.to_thread(
            request, web_server.port, "GET", f"/attachments/{names['unsent']}", headers=headers
        )
        assert status == 404


async def test_live_channels_that_never_log_in_do_not_keep_a_real_page_out(web_server: WebServer) -> None:
    """300 WebSockets (a forged Origin is easy outside a browser) that take the challenge and never
    answer: the oldest are closed as new ones come, and a real login still gets through at once."""
    await web_server.start()
    own = {"Origin": f"http://127.0.0.1:{web_server.port}"}
    idle: list[websockets.ClientConnection] = []
    try:
        refused = 0
        for _ in range(300):
            try:
                socket = await websockets.connect(
                    live_uri(web_server), origin=None, additional_headers=own, open_timeout=10
                )
            except websockets.InvalidStatus:
                refused += 1
                continue
            idle.append(socket)
        started = time.monotonic()
        async with live(web_server) as (_, hello):
            assert hello["type"] == "hello"
        assert time.monotonic() - started < LOGIN_TIMEOUT / 2
        assert refused == 0
        oldest = idle[: 300 - MAX_PENDING_LOGINS]  # each newcomer past the limit closed the oldest waiting one
        await asyncio.wait_for(asyncio.gather(*(s.wait_closed() for s in oldest)), 10)
        assert {s.close_code for s in oldest} == {1008}
    finally:
        for socket in idle:
            await socket.close()
