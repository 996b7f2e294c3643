"""Attacks on the page's trusted-proxy setting, against the real page server process: forwarding
headers from a peer that is not a trusted proxy are ignored, a trusted proxy cannot forward a host
the page does not answer for, and the forwarded https origin is the only one then accepted."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import websockets

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "web"))
from web_helpers import WebServer, live_uri, request

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def web_server(tmp_path: Path) -> AsyncIterator[WebServer]:
    """A page server on ``tmp_path/journal.jsonl`` (started by the test)."""
    server = WebServer(tmp_path / "journal.jsonl", tmp_path)
    yield server
    if server.process is not None and server.process.returncode is None:
        await server.kill9()


async def live_status(server: WebServer, headers: dict[str, str]) -> int:
    """The HTTP status of a live-channel upgrade with ``headers`` (101 when accepted; the client
    sends the Host of the URI itself)."""
    sent = {name: value for name, value in headers.items() if name != "Host"}
    try:
        async with websockets.connect(live_uri(server), origin=None, additional_headers=sent):
            return 101
    except websockets.InvalidStatus as refused:
        return refused.response.status_code


def forged(server: WebServer, origin: str, **extra: str) -> dict[str, str]:
    return {"Host": f"127.0.0.1:{server.port}", "Origin": origin, **extra}


@pytest.mark.parametrize("trusted", [None, "10.0.0.0/8"])
async def test_forwarding_headers_from_a_peer_that_is_not_a_trusted_proxy_are_ignored(
    web_server: WebServer, trusted: str | None
) -> None:
    await web_server.start(*(["--trusted-proxy", trusted] if trusted else []), "--allowed-host", "chat.example")
    https = "https://chat.example"
    for claims in (
        {"X-Forwarded-Proto": "https", "X-Forwarded-Host": "chat.example"},
        {"Forwarded": 'proto=https;host="chat.example"'},
    ):
        assert await live_status(web_server, forged(web_server, https, **claims)) == 403
        assert await live_status(web_server, forged(web_server, f"http://127.0.0.1:{web_server.port}", **claims)) == 101
        status, _, _ = await asyncio.to_thread(
            request, web_server.port, "POST", "/upload", headers=forged(web_server, https, **claims), body=b"x"
        )
        assert status == 401  # no session, and the forwarded origin counts for nothing


async def test_a_trusted_proxy_may_forward_only_a_host_the_page_answers_for(web_server: WebServer) -> None:
    await web_server.start("--trusted-proxy", "127.0.0.1", "--allowed-host", "chat.example")
    for host in ("attacker.example", "chat.example.evil", "chat.example:443/x", "chat.example, attacker.example"):
        claims = {"X-Forwarded-Proto": "https", "X-Forwarded-Host": host}
        status, _, body = await asyncio.to_thread(
            request, web_server.port, "GET", "/", headers=forged(web_server, "", **claims)
        )
        assert status == 421 and b"host name" in body, host
        assert await live_status(web_server, forged(web_server, f"https://{host}", **claims)) == 403, host
    odd_scheme = {"X-Forwarded-Proto": "javascript", "X-Forwarded-Host": "chat.example"}
    assert (
        await asyncio.to_thread(request, web_server.port, "GET", "/", headers=forged(web_server, "", **odd_scheme))
    )[0] == 421


async def test_through_a_trusted_proxy_only_the_forwarded_https_origin_is_accepted(web_server: WebServer) -> None:
    await web_server.start("--trusted-proxy", "127.0.0.1", "--allowed-host", "chat.example")
    for claims in (
        {"X-Forwarded-Proto": "https", "X-Forwarded-Host": "chat.example:8443"},
        {"Forwarded": 'for=10.1.2.3;proto=https;host="chat.example:8443"'},
        {"Forwarded": 'proto=http;host="attacker.example", for=10.1.2.3;proto=https;host="chat.example:8443"'},
    ):
        assert await live_status(web_server, forged(web_server, "https://chat.example:8443", **claims)) == 101
        for origin in ("http://chat.example:8443", "https://chat.example", f"http://127.0.0.1:{web_server.port}"):
            assert await live_status(web_server, forged(web_server, origin, **claims)) == 403, (claims, origin)


def test_a_trusted_proxy_that_is_not_an_address_is_refused_at_start(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "coven_codex",
            "web",
            "--journal",
            str(tmp_path / "j.jsonl"),
            "--port",
            "0",
            "--trusted-proxy",
            "my-proxy",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--trusted-proxy 'my-proxy' is not an IP address or network" in done.stderr
