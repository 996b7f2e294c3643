"""The socket's protection: modes, the secret handshake, and hostile clients."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import stat
from pathlib import Path

import pytest
from mcp_helpers import RawClient

from coven_codex.mcp import ConnectionLimits, SpellRegistry, SpellServer, SpellServerError
from mcp_shim import wire


async def _refusal(server: SpellServer, first_line: bytes) -> dict[str, object]:
    reader, writer = await asyncio.open_unix_connection(str(server.socket_path))
    writer.write(first_line)
    await writer.drain()
    answer = json.loads(await asyncio.wait_for(reader.readline(), 10))
    assert await asyncio.wait_for(reader.read(), 10) == b"", "a refused connection must be closed"
    writer.close()
    return answer


async def test_socket_and_directory_modes(server: SpellServer) -> None:
    assert stat.S_IMODE(os.stat(server.socket_path.parent).st_mode) == 0o700
    info = os.stat(server.socket_path)
    assert stat.S_ISSOCK(info.st_mode)
    assert stat.S_IMODE(info.st_mode) == 0o600


async def test_given_socket_dir_is_tightened_and_cleaned(registry: SpellRegistry, tmp_path: Path) -> None:
    loose = tmp_path / "s"
    loose.mkdir(mode=0o755)
    os.chmod(loose, 0o755)
    async with SpellServer(registry, socket_dir=loose) as running:
        assert stat.S_IMODE(os.stat(loose).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(running.socket_path).st_mode) == 0o600
    assert not (loose / "mcp.sock").exists()


async def test_too_long_socket_path_is_refused_clearly(registry: SpellRegistry, tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 120)
    with pytest.raises(SpellServerError, match="over the 107-byte limit"):
        async with SpellServer(registry, socket_dir=deep):
            pass
    assert not deep.exists(), "a failed start must remove the directory it created"


async def test_a_second_server_on_a_live_socket_is_refused(server: SpellServer, registry: SpellRegistry) -> None:
    with pytest.raises(SpellServerError, match="already serves"):
        async with SpellServer(registry, socket_dir=server.socket_path.parent):
            pass


async def test_wrong_secret_is_refused_and_logged(server: SpellServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="coven_codex.mcp")
    answer = await _refusal(server, wire.hello("not-the-secret-at-all"))
    assert answer == {"coven": "refused", "reason": "wrong session secret"}
    assert any(
        "refused an MCP connection from pid" in r.getMessage() and "wrong session secret" in r.getMessage()
        for r in caplog.records
    )
    assert server.secret not in caplog.text


async def test_json_rpc_without_handshake_is_refused(server: SpellServer) -> None:
    line = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}\n'
    answer = await _refusal(server, line)
    assert answer["coven"] == "refused"


async def test_silent_client_is_dropped_after_the_handshake_timeout(registry: SpellRegistry) -> None:
    async with SpellServer(registry, limits=ConnectionLimits(handshake_timeout=0.3)) as running:
        reader, writer = await asyncio.open_unix_connection(str(running.socket_path))
        answer = json.loads(await asyncio.wait_for(reader.readline(), 10))
        assert answer["coven"] == "refused" and "no handshake" in str(answer["reason"])
        writer.close()


async def test_hostile_clients_leave_the_server_serving(server: SpellServer) -> None:
    good = await RawClient.connect(server)
    await good.initialize()

    garbage = await RawClient.connect(server)
    await garbage.send(os.urandom(4096) + b"\n\x00\xff\n{{{{\n")
    hundred_mb = await RawClient.connect(server)
    chunk = b"x" * (1 << 20)

    async def flood() -> None:
        for _ in range(100):
            hundred_mb.writer.write(chunk)
            await hundred_mb.writer.drain()
        hundred_mb.writer.write(b"\n")
        await hundred_mb.writer.drain()

    flooding = asyncio.create_task(flood())
    half_closed = await RawClient.connect(server, initialize=True)
    await half_closed.send(
        {
            "jsonrpc": "2.0",
            "id": "h",
            "method": "tools/call",
            "params": {"name": "sleep", "arguments": {"seconds": 0.2}},
        }
    )
    half_closed.writer.write_eof()
    no_hello = await RawClient.connect(server, hello=False)
    no_hello.writer.write(b"half a hel")
    no_hello.writer.write_eof()

    for index in range(20):
        response = await good.request("tools/call", {"name": "add", "arguments": {"a": index}}, request_id=index)
        assert response["result"]["content"][0]["text"] == str(index + 2)

    await flooding
    too_big = await hundred_mb.receive(timeout=30)
    assert too_big["error"]["code"] == -32600 and "too large" in too_big["error"]["message"]
    assert (await hundred_mb.request("ping", request_id="still"))["result"] == {}

    errors = [await garbage.receive() for _ in range(3)]
    assert {e["error"]["code"] for e in errors} == {-32700}

    answered = await half_closed.receive()
    assert answered["id"] == "h" and answered["result"]["content"][0]["text"] == "slept 0.2"
    assert await asyncio.wait_for(half_closed.reader.read(), 10) == b""

    assert (await good.request("ping", request_id="end"))["result"] == {}
    for client in (good, garbage, hundred_mb, half_closed, no_hello):
        await client.close()


async def test_abrupt_disconnect_cancels_calls_and_server_keeps_serving(server: SpellServer) -> None:
    doomed = await RawClient.connect(server, initialize=True)
    await doomed.send(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "sleep", "arguments": {"seconds": 30}}}
    )
    sock = doomed.writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    doomed.writer.transport.abort()
    survivor = await RawClient.connect(server)
    assert (await survivor.request("ping"))["result"] == {}
    for _ in range(100):
        if server.connection_count == 1:
            break
        await asyncio.sleep(0.05)
    assert server.connection_count == 1
    await survivor.close()
