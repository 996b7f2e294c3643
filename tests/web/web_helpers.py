"""Helpers for the web page's tests: the page server as a real subprocess, plain HTTP requests,
and headless Chromium (Debian's package, driven by Playwright; no browser download)."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import os
import re
import resource
import signal
import ssl
import struct
import subprocess
import sys
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import websockets
from playwright.async_api import BrowserContext, Page, async_playwright
from websockets.asyncio.client import ClientConnection
from websockets.typing import Origin

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
    open_files: int | None = None
    """The server's soft open-file limit (``ulimit -n``), when the test sets one."""

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
                preexec_fn=None if self.open_files is None else self._limit_open_files,
            )
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), 30)
        match = URL_LINE.search(line.decode())
        assert match, f"no URL printed: {line!r}\n{log.read_text()}"
        self.url = match.group(1)
        self.port = int(self.url.split(":")[2].split("/")[0])
        return self.url

    def _limit_open_files(self) -> None:
        assert self.open_files is not None
        _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.open_files, hard))

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


def page_headers(server: WebServer, session: str | None = None) -> dict[str, str]:
    """The headers of the page's own requests: Host, its Origin and, given, the live channel's session."""
    headers = {"Host": f"127.0.0.1:{server.port}", "Origin": f"http://127.0.0.1:{server.port}"}
    if session is not None:
        headers["Authorization"] = f"Bearer {session}"
    return headers


def live_uri(server: WebServer) -> str:
    return f"ws://127.0.0.1:{server.port}/live"


@contextlib.asynccontextmanager
async def live(
    server: WebServer, *, token: str | None = None
) -> AsyncIterator[tuple[ClientConnection, dict[str, Any]]]:
    """The live channel, logged in with the access token as the page does; (socket, its hello)."""
    async with websockets.connect(live_uri(server), origin=Origin(f"http://127.0.0.1:{server.port}")) as socket:
        challenge = json.loads(await asyncio.wait_for(socket.recv(), 10))
        assert challenge["type"] == "challenge", challenge
        await socket.send(json.dumps({"type": "login", "token": token or server.token}))
        hello = json.loads(await asyncio.wait_for(socket.recv(), 10))
        assert hello["type"] == "hello", hello
        yield socket, hello


@contextlib.asynccontextmanager
async def chromium(profile: Path, *extra_args: str) -> AsyncIterator[BrowserContext]:
    """Headless Chromium with a fresh profile in ``profile`` (and ``extra_args`` on its command line)."""
    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            headless=True,
            args=[*CHROMIUM_ARGS, *extra_args],
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


@dataclass
class RecordedRequest:
    """What another local server received: the request line and the headers."""

    line: str
    headers: list[tuple[str, str]]


@dataclass
class OtherLocalServer:
    """Another HTTP server on 127.0.0.1 (another port): logs every request's line and headers and
    answers a small page, optionally setting ``cookies`` (``Set-Cookie`` values) on 127.0.0.1."""

    cookies: tuple[str, ...] = ()
    requests: list[RecordedRequest] = field(default_factory=list)
    port: int = 0
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    _server: asyncio.Server | None = None

    async def __aenter__(self) -> OtherLocalServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def wait_for(self, path: str) -> None:
        """Until a request for ``path`` has arrived."""
        async with asyncio.timeout(30):
            while not any(r.line.split(" ")[1:2] == [path] for r in self.requests):
                self.arrived.clear()
                await self.arrived.wait()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
                line, *fields = head.decode("latin-1").split("\r\n")
                headers = [(k.strip(), v.strip()) for k, _, v in (f.partition(":") for f in fields if f)]
                self.requests.append(RecordedRequest(line, headers))
                self.arrived.set()
                body = b"<!doctype html><title>another local server</title><p>another local server</p>"
                extra = "".join(f"Set-Cookie: {cookie}\r\n" for cookie in self.cookies)
                writer.write(
                    (
                        f"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n{extra}Content-Length: {len(body)}\r\n\r\n"
                    ).encode()
                    + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()


def self_signed_cert(folder: Path, name: str = "localhost") -> tuple[Path, Path]:
    """A self-signed certificate and key for ``name`` (made with Debian's openssl); (cert, key)."""
    cert, key = folder / "proxy-cert.pem", folder / "proxy-key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            f"/CN={name}",
            "-addext",
            f"subjectAltName=DNS:{name}",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    return cert, key


FORWARDED_HEADERS = ("forwarded", "x-forwarded-proto", "x-forwarded-host", "x-forwarded-for")


@dataclass
class TlsProxy:
    """A TLS-terminating reverse proxy on 127.0.0.1 in front of the page server, as nginx would be:
    it drops the client's own forwarding headers and adds its own (``style``: ``x-forwarded`` for
    ``X-Forwarded-Proto``/``X-Forwarded-Host``, ``forwarded`` for RFC 7239 ``Forwarded``). Each
    HTTP request gets ``Connection: close`` (one request per connection, so every request passes
    through the rewrite); a WebSocket upgrade is piped both ways until either side closes."""

    upstream_port: int
    cert: Path
    key: Path
    style: str = "x-forwarded"
    port: int = 0
    upgrades: list[str] = field(default_factory=list)
    """The request lines of the WebSocket upgrades it carried (over TLS)."""
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def __aenter__(self) -> TlsProxy:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert, self.key)
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=context)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    def _rewrite(self, head: bytes) -> tuple[bytes, bool]:
        line, *fields = head.decode("latin-1").split("\r\n")
        headers = [(k.strip(), v.strip()) for k, _, v in (f.partition(":") for f in fields if f)]
        upgrade = any(k.lower() == "upgrade" and v.lower() == "websocket" for k, v in headers)
        host = next((v for k, v in headers if k.lower() == "host"), "")
        kept = [(k, v) for k, v in headers if k.lower() not in FORWARDED_HEADERS]
        if not upgrade:
            kept = [(k, v) for k, v in kept if k.lower() not in ("connection", "keep-alive")]
            kept.append(("Connection", "close"))
        else:
            self.upgrades.append(line)
        if self.style == "forwarded":
            kept.append(("Forwarded", f'for=127.0.0.1;proto=https;host="{host}"'))
        else:
            kept += [("X-Forwarded-Proto", "https"), ("X-Forwarded-Host", host), ("X-Forwarded-For", "127.0.0.1")]
        kept = [(k, v) for k, v in kept if k.lower() != "host"]
        kept.insert(0, ("Host", f"127.0.0.1:{self.upstream_port}"))
        text = line + "\r\n" + "".join(f"{k}: {v}\r\n" for k, v in kept) + "\r\n"
        return text.encode("latin-1"), upgrade

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        upstream: asyncio.StreamWriter | None = None
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
            rewritten, _upgrade = self._rewrite(head)
            up_reader, upstream = await asyncio.open_connection("127.0.0.1", self.upstream_port)
            upstream.write(rewritten)
            await upstream.drain()
            pipes = [asyncio.create_task(_pipe(reader, upstream)), asyncio.create_task(_pipe(up_reader, writer))]
            try:
                await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)  # either side ended: close both
            finally:
                for pipe in pipes:
                    pipe.cancel()
                await asyncio.gather(*pipes, return_exceptions=True)
        except (asyncio.IncompleteReadError, TimeoutError, ConnectionError, ssl.SSLError):
            pass
        finally:
            for end in (upstream, writer):
                if end is not None:
                    end.close()
            self._tasks.discard(task)


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Copy ``source`` to ``sink`` until ``source`` ends (or either side fails)."""
    with contextlib.suppress(ConnectionError, ssl.SSLError, OSError):
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
