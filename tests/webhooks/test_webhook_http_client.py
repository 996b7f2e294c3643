"""The small HTTP/1.1 client the webhook sender posts with (``coven_codex.http11.send_request``)."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from coven_codex.http11 import MAX_RESPONSE_BODY, HttpProtocolError, read_request, send_request

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def serve(handler: Handler, ssl_context: ssl.SSLContext | None = None) -> asyncio.Server:
    return await asyncio.start_server(handler, "127.0.0.1", 0, ssl=ssl_context)


def port(server: asyncio.Server) -> int:
    return int(server.sockets[0].getsockname()[1])


async def answer(raw: bytes, *, keep_open: bool = False) -> tuple[Handler, list[bytes]]:
    bodies: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await read_request(reader, writer)
        assert request is not None
        bodies.append(request.body)
        writer.write(raw)
        await writer.drain()
        if keep_open:
            await reader.read()  # a server that ignores `connection: close`
        writer.close()

    return handler, bodies


@pytest.mark.parametrize(
    ("raw", "status", "body"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 200, b"ok"),
        (b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n", 201, b"abcde"),
        (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n", 202, b""),
        (b"HTTP/1.1 500 Oops\r\n\r\nuntil the connection closes", 500, b"until the connection closes"),
    ],
)
async def test_responses_of_every_framing(raw: bytes, status: int, body: bytes) -> None:
    handler, bodies = await answer(raw)
    server = await serve(handler)
    async with server:
        url = urlsplit(f"http://127.0.0.1:{port(server)}/hook?x=1")
        async with asyncio.timeout(10):
            response = await send_request(url, "POST", b'{"a":1}', [("Content-Type", "application/json")])
    assert (response.status, response.body) == (status, body)
    assert bodies == [b'{"a":1}']


async def test_a_204_from_a_server_that_keeps_the_connection_open_is_not_waited_on() -> None:
    handler, _ = await answer(b"HTTP/1.1 204 No Content\r\n\r\n", keep_open=True)
    server = await serve(handler)
    async with server:
        async with asyncio.timeout(10):
            response = await send_request(urlsplit(f"http://127.0.0.1:{port(server)}/"), "POST", b"x", [])
    assert response.status == 204


async def test_a_huge_body_is_not_read_and_a_non_http_peer_is_an_error() -> None:
    handler, _ = await answer(f"HTTP/1.1 200 OK\r\nContent-Length: {MAX_RESPONSE_BODY + 1}\r\n\r\n".encode())
    server = await serve(handler)
    async with server:
        async with asyncio.timeout(10):
            response = await send_request(urlsplit(f"http://127.0.0.1:{port(server)}/"), "POST", b"x", [])
    assert response.status == 200 and response.body == b""
    handler, _ = await answer(b"SSH-2.0-OpenSSH_9.6\r\n")
    server = await serve(handler)
    async with server:
        with pytest.raises(HttpProtocolError):
            async with asyncio.timeout(10):
                await send_request(urlsplit(f"http://127.0.0.1:{port(server)}/"), "POST", b"x", [])


async def test_https_with_the_servers_certificate_checked(tmp_path: Path) -> None:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    make = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert)]
    subprocess.run(
        [*make, "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"],
        check=True,
        capture_output=True,
    )
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert, key)
    handler, bodies = await answer(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
    server = await serve(handler, server_context)
    async with server:
        url = urlsplit(f"https://localhost:{port(server)}/hook")
        trusting = ssl.create_default_context(cafile=str(cert))
        async with asyncio.timeout(10):
            response = await send_request(url, "POST", b"signed", [], ssl_context=trusting)
        assert response.status == 200 and bodies == [b"signed"]
        with pytest.raises(ssl.SSLError):  # the default trust store does not know this certificate
            async with asyncio.timeout(10):
                await send_request(url, "POST", b"signed", [])
