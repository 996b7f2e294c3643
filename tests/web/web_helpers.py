"""Helpers for the web page's tests: the page server as a real subprocess, plain HTTP requests,
and headless Chromium (Debian's package, driven by Playwright; no browser download)."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import os
import re
import signal
import struct
import sys
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from playwright.async_api import BrowserContext, Page, async_playwright

TOKEN = "test-token-0123456789abcdefghij"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
URL_LINE = re.compile(r"open (http://\S+)")


@dataclass
class WebServer:
    """``coven-codex web`` on a journal, as a subprocess; restartable on the same port."""

    journal: Path
    log_dir: Path
    token: str = TOKEN
    port: int = 0
    url: str = ""
    process: asyncio.subprocess.Process | None = None
    runs: int = 0
    logs: list[Path] = field(default_factory=list)

    async def start(self, *args: str) -> str:
        """Start it (on the port of the previous run, if any) and return the URL it printed."""
        self.runs += 1
        log = self.log_dir / f"web-{self.runs}.log"
        self.logs.append(log)
        env = {**os.environ, "COVEN_WEB_TOKEN": self.token, "PYTHONUNBUFFERED": "1"}
        with log.open("wb") as err:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "coven_codex",
                "web",
                "--journal",
                str(self.journal),
                "--port",
                str(self.port),
                "--sender",
                "tester",
                *args,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=err,
                env=env,
            )
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), 30)
        match = URL_LINE.search(line.decode())
        assert match, f"no URL printed: {line!r}\n{log.read_text()}"
        self.url = match.group(1)
        self.port = int(self.url.split(":")[2].split("/")[0])
        return self.url

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def kill9(self) -> None:
        assert self.process is not None
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        await self.process.wait()

    async def stop(self) -> int:
        assert self.process is not None
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return await asyncio.wait_for(self.process.wait(), 15)
        except TimeoutError:
            await self.kill9()
            raise AssertionError("the page server did not stop within 15 s of SIGTERM") from None

    def log(self) -> str:
        return "\n".join(path.read_text(errors="replace") for path in self.logs if path.exists())


def request(
    port: int, method: str, path: str, *, headers: dict[str, str] | None = None, body: bytes | None = None
) -> tuple[int, dict[str, str], bytes]:
    """One HTTP request to 127.0.0.1:``port``; (status, lower-cased headers, body)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def cookie_header(server: WebServer) -> dict[str, str]:
    """The headers of a page that logged in: Host, the token cookie and its own Origin."""
    return {
        "Host": f"127.0.0.1:{server.port}",
        "Cookie": f"coven_web_{server.port}={server.token}",
        "Origin": f"http://127.0.0.1:{server.port}",
    }


def socket_headers(server: WebServer) -> dict[str, str]:
    """What the page's live channel sends besides the Host (which the client adds): cookie and Origin."""
    return {k: v for k, v in cookie_header(server).items() if k != "Host"}


@contextlib.asynccontextmanager
async def chromium(profile: Path) -> AsyncIterator[BrowserContext]:
    """Headless Chromium with a fresh profile in ``profile``."""
    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1100, "height": 720},
        )
        try:
            yield context
        finally:
            await context.close()


async def open_page(context: BrowserContext, url: str, errors: list[str]) -> Page:
    """A new tab on ``url``; JavaScript errors are collected in ``errors``."""
    page = await context.new_page()
    page.on("pageerror", lambda error: errors.append(str(error)))
    await page.goto(url)
    await page.wait_for_function("() => document.getElementById('connection').textContent === 'connected'")
    return page


async def message_ids(page: Page) -> list[str]:
    """The ids of the messages on the page, in order."""
    ids: list[str] = await page.eval_on_selector_all("#messages .msg[id]", "nodes => nodes.map(n => n.id)")
    return ids


async def message_texts(page: Page, kind: str) -> list[str]:
    """The text of every shown message of ``kind``."""
    texts: list[str] = await page.eval_on_selector_all(
        f"#messages .msg.{kind}[id] .body", "nodes => nodes.map(n => n.textContent.trim())"
    )
    return texts


def png(width: int = 2, height: int = 2) -> bytes:
    """A small valid PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )
