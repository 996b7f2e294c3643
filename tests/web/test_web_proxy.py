"""The page behind a TLS-terminating reverse proxy, in real headless Chromium: the proxy is a small
Python one in front of the real page server (a self-signed certificate made by the test), as nginx
would be. The page logs in, sends a thought and shows a reply over ``wss://``, and a reload logs in
again with the device key kept for the https origin."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import WebSocket
from web_helpers import TlsProxy, WebServer, chromium, message_texts, self_signed_cert

from coven_codex.entries import ResponseEntry, ThoughtEntry
from coven_codex.journal import FileJournal, JournalRecord

pytestmark = pytest.mark.timeout(180)

PUBLIC_NAME = "chat.example.test"
CONNECTED = "() => document.getElementById('connection').textContent === 'connected'"


@pytest.mark.parametrize("style", ["x-forwarded", "forwarded"])
async def test_behind_an_https_reverse_proxy_the_page_logs_in_sends_and_shows_a_reply_over_wss(
    web_server: WebServer, tmp_path: Path, chromium_path: str, style: str
) -> None:
    journal = FileJournal(web_server.journal, durability="never")
    await journal.append(ResponseEntry(conversation="room", text="an earlier **reply**"))
    await web_server.start("--trusted-proxy", "127.0.0.1", "--allowed-host", PUBLIC_NAME)
    cert, key = self_signed_cert(tmp_path, PUBLIC_NAME)
    errors: list[str] = []
    sockets: list[str] = []

    def opened(socket: WebSocket) -> None:
        sockets.append(socket.url)

    async with (
        TlsProxy(web_server.port, cert, key, style) as proxy,
        chromium(
            tmp_path / "profile",
            "--ignore-certificate-errors",
            f"--host-resolver-rules=MAP {PUBLIC_NAME} 127.0.0.1",
        ) as browser,
    ):
        public = f"https://{PUBLIC_NAME}:{proxy.port}"
        page = await browser.new_page()
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on("websocket", opened)
        await page.goto(f"{public}/?token={web_server.token}#c=room")
        await page.wait_for_function(CONNECTED)
        assert sockets == [f"wss://{PUBLIC_NAME}:{proxy.port}/live"]
        assert await page.evaluate("window.isSecureContext") is True
        # "connected" shows at the login's hello; the conversation's entries come after the page
        # subscribes, so the earlier reply is waited for, not expected at once
        await page.wait_for_function("() => document.querySelectorAll('#messages .msg.response').length === 1")
        assert await message_texts(page, "response") == ["an earlier reply"]
        await page.fill("#input", "hello through the proxy")
        await page.press("#input", "Enter")
        await page.wait_for_function(
            "() => [...document.querySelectorAll('.msg.thought')].some("
            "n => n.textContent.includes('hello through the proxy'))"
        )
        await journal.append(ResponseEntry(conversation="room", text="a reply over **wss**"))
        await page.wait_for_function("() => document.querySelectorAll('#messages .msg.response').length === 2")
        assert await message_texts(page, "response") == ["an earlier reply", "a reply over wss"]
        await page.reload()  # no token now: the device key kept for the https origin logs it in
        await page.wait_for_function(CONNECTED)
        await page.wait_for_function("() => document.querySelectorAll('#messages .msg').length === 3")
        assert "token" not in page.url
        assert sockets[-1] == f"wss://{PUBLIC_NAME}:{proxy.port}/live" and len(sockets) == 2
        assert errors == []
    assert [line.split(" ")[1] for line in proxy.upgrades] == ["/live", "/live"]
    written = [item.entry for item in await journal.read() if isinstance(item, JournalRecord)]
    thoughts = [e for e in written if isinstance(e, ThoughtEntry)]
    assert [(t.text, t.sender, t.conversation) for t in thoughts] == [("hello through the proxy", "tester", "room")]
    await journal.aclose()
