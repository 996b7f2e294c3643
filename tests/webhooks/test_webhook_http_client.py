"""The webhook sender's HTTP client (``coven_codex.webhooks.http``, on ``httpx``) against raw loopback
servers: every response framing, bounded bodies, TLS with the certificate checked, a proxy from the
environment, connections kept for the next delivery."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest

from coven_codex.support.http11 import read_request
from coven_codex.webhooks.http import MAX_RESPONSE_BODY, DeliveryError, HttpResponse, open_client, post

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def send(
    url: str, body: bytes, headers: list[tuple[str, str]] | None = None, ssl_context: ssl.SSLContext | None = None
) -> HttpResponse:
    async with asyncio.timeout(10), open_client(timeout=5, ssl_context=ssl_context) as client:
        return await post(client, url, body, headers or [])


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
        url = f"http://127.0.0.1:{port(server)}/hook?x=1"
        response = await send(url, b'{"a":1}', [("Content-Type", "application/json")])
    assert (response.status, response.body) == (status, body)
    assert bodies == [b'{"a":1}']


async def test_a_204_from_a_server_that_keeps_the_connection_open_is_not_waited_on() -> None:
    handler, _ = await answer(b"HTTP/1.1 204 No Content\r\n\r\n", keep_open=True)
    server = await serve(handler)
    async with server:
        response = await send(f"http://127.0.0.1:{port(server)}/", b"x")
    assert response.status == 204


async def test_a_huge_body_is_cut_and_a_non_http_peer_is_an_error() -> None:
    big = b"x" * (4 * MAX_RESPONSE_BODY)
    handler, _ = await answer(b"HTTP/1.1 400 Bad\r\nContent-Length: %d\r\n\r\n%s" % (len(big), big))
    server = await serve(handler)
    async with server:
        response = await send(f"http://127.0.0.1:{port(server)}/", b"x")
    assert response.status == 400 and response.body == big[:MAX_RESPONSE_BODY]
    handler, _ = await answer(b"SSH-2.0-OpenSSH_9.6\r\n")
    server = await serve(handler)
    async with server:
        with pytest.raises(DeliveryError):
            await send(f"http://127.0.0.1:{port(server)}/", b"x")


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
        url = f"https://localhost:{port(server)}/hook"
        trusting = ssl.create_default_context(cafile=str(cert))
        response = await send(url, b"signed", ssl_context=trusting)
        assert response.status == 200 and bodies == [b"signed"]
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):  # not in the default store
            await send(url, b"signed")


async def test_a_proxy_from_the_environment_carries_the_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """``HTTP_PROXY`` is honoured: the request goes to the proxy, in absolute form, for a host that
    does not even resolve."""
    targets: list[str] = []

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await read_request(reader, writer)
        assert request is not None
        targets.append(f"{request.method} {request.target}")
        writer.write(b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await serve(proxy)
    async with server:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port(server)}")
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        response = await send("http://receiver.invalid/hook", b"via the proxy")
    assert response.status == 202 and targets == ["POST http://receiver.invalid/hook"]


async def test_one_connection_serves_several_deliveries() -> None:
    peers: list[object] = []

    async def keep_alive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peers.append(writer.get_extra_info("peername"))
        while (request := await read_request(reader, writer)) is not None:
            assert request.body.startswith(b"n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
        writer.close()

    server = await serve(keep_alive)
    async with server, asyncio.timeout(10), open_client(timeout=5) as client:
        for n in range(3):
            assert (await post(client, f"http://127.0.0.1:{port(server)}/", b"n%d" % n, [])).status == 200
    assert len(peers) == 1
