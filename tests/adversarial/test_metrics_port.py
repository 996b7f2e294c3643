"""Attacks on the metrics port (coven_codex/metrics/server.py): strangers, floods, idle
connections, wrong requests, readiness checks that fail or hang."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
from collections.abc import AsyncIterator
from typing import Any

import psutil
import pytest

from coven_codex.metrics.instruments import Instruments
from coven_codex.metrics.scrape import get
from coven_codex.metrics.server import MAX_CONNECTIONS, MetricsServer, allowed_peer


def non_loopback_address() -> str:
    """An IPv4 address of this machine that is not loopback (the tests need one)."""
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family == socket.AF_INET and not ipaddress.ip_address(address.address).is_loopback:
                return address.address
    raise AssertionError("this machine has no non-loopback IPv4 address to connect from")


@contextlib.asynccontextmanager
async def serving(**options: Any) -> AsyncIterator[MetricsServer]:
    async with MetricsServer(Instruments(), **options) as server:
        yield server


async def raw_request(host: str, port: int, request: bytes) -> bytes:
    """Send ``request``; the whole answer (empty when the server closed the connection unanswered)."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(request)
        await writer.drain()
        async with asyncio.timeout(10):
            return await reader.read()
    except ConnectionResetError:  # closed with our request unread
        return b""
    finally:
        writer.close()


def test_only_loopback_and_the_allowed_networks_may_connect() -> None:
    allow = [ipaddress.ip_network("10.1.0.0/16")]
    assert allowed_peer("127.0.0.1", allow) and allowed_peer("::1", allow)
    assert allowed_peer("::ffff:127.0.0.1", ())  # an IPv4 client of a dual-stack socket
    assert allowed_peer("10.1.2.3", allow)
    assert not allowed_peer("10.2.0.1", allow)
    assert not allowed_peer("192.0.2.2", ())
    assert not allowed_peer("", allow) and not allowed_peer("not-an-address", allow)


async def test_a_client_beyond_loopback_is_refused_unless_its_network_is_allowed() -> None:
    address = non_loopback_address()
    async with serving(host="0.0.0.0") as server:
        answer = await raw_request(address, server.port, b"GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 403 "), answer[:200]
        assert b"coven_" not in answer
        status, _ = await get(f"http://127.0.0.1:{server.port}", "/healthz")
        assert status == 200
    async with serving(host="0.0.0.0", allow=[ipaddress.ip_network(f"{address}/32")]) as server:
        status, text = await get(f"http://{address}:{server.port}", "/metrics")
        assert status == 200 and "coven_thoughts_received_total" in text


async def test_connections_over_the_bound_are_turned_away_and_the_port_recovers() -> None:
    async with serving() as server:
        held = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(MAX_CONNECTIONS)]
        try:
            # every held connection is accepted before the next one (the kernel's accept queue is in order)
            answer = await raw_request("127.0.0.1", server.port, b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            assert answer == b"", answer[:200]
        finally:
            for _, writer in held:
                writer.close()
        answer = b""
        for _ in range(100):  # the held connections end as the server reads their EOF
            answer = await raw_request("127.0.0.1", server.port, b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            if answer:
                break
            await asyncio.sleep(0.05)
        assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]


async def test_an_idle_connection_is_closed_after_the_request_timeout() -> None:
    async with serving(request_timeout=0.3) as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /metr")  # a request that never ends (slowloris)
        await writer.drain()
        async with asyncio.timeout(5):
            assert await reader.read() == b""
        writer.close()


async def test_wrong_methods_and_paths_are_answered_not_served() -> None:
    async with serving() as server:
        answer = await raw_request("127.0.0.1", server.port, b"POST /metrics HTTP/1.1\r\ncontent-length: 0\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 405 ")
        status, text = await get(f"http://127.0.0.1:{server.port}", "/secrets")
        assert status == 404 and "/readyz" in text
        answer = await raw_request("127.0.0.1", server.port, b"\x16\x03\x01 not http\r\n\r\n")
        assert answer == b""  # not HTTP: closed


@pytest.mark.parametrize("failure", ["raises", "hangs", "says why"])
async def test_readyz_names_the_failing_check_and_still_answers_in_time(failure: str) -> None:
    async def broken() -> str | None:
        if failure == "raises":
            raise ConnectionError("refused")
        if failure == "hangs":
            await asyncio.Event().wait()
        return "the platform is not connected"

    async def fine() -> str | None:
        return None

    async with serving(checks={"journal": fine, "platform": broken}, check_timeout=0.3) as server:
        status, text = await get(f"http://127.0.0.1:{server.port}", "/readyz")
    assert status == 503
    expected = {
        "raises": "platform: ConnectionError: refused\n",
        "hangs": "platform: no answer within 0.3s\n",
        "says why": "platform: the platform is not connected\n",
    }[failure]
    assert text == "not ready\n" + expected


async def test_a_port_in_use_is_one_clear_error() -> None:
    async with serving() as first:
        with pytest.raises(OSError, match=r"cannot serve metrics on 127\.0\.0\.1:\d+ .*pick another metrics_port"):
            async with serving(port=first.port):
                pass


def test_two_instruments_share_no_state() -> None:
    one, two = Instruments(), Instruments()
    one.thought_received("t1")
    assert one.registry.get_sample_value("coven_thoughts_received_total") == 1
    assert two.registry.get_sample_value("coven_thoughts_received_total") == 0
