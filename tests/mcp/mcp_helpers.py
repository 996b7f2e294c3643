"""Helpers for the spell (MCP) tests: the shim's launch parameters and a raw socket client."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from mcp import StdioServerParameters

from coven_codex.mcp import SpellServer, codex_mcp_entry
from mcp_shim import wire


def shim_parameters(server: SpellServer, secret: str | None = None) -> StdioServerParameters:
    entry = codex_mcp_entry(server.socket_path, secret or server.secret, "0.169.0")
    return StdioServerParameters(command=entry["command"], args=entry["args"], env=entry["env"])


class RawClient:
    """Speaks the socket protocol directly: handshake, then JSON lines."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(
        cls,
        server: SpellServer,
        secret: str | None = None,
        *,
        hello: bool = True,
        limit: int = 64 * 2**20,
        initialize: bool = False,
    ) -> RawClient:
        reader, writer = await asyncio.open_unix_connection(str(server.socket_path), limit=limit)
        client = cls(reader, writer)
        if hello:
            writer.write(wire.hello(secret or server.secret))
            await writer.drain()
            answer = json.loads(await reader.readline())
            assert answer == {"coven": "welcome", "version": 1}, answer
        if initialize:
            assert "result" in await client.initialize()
        return client

    async def send(self, message: Any) -> None:
        data = message if isinstance(message, bytes) else json.dumps(message).encode() + b"\n"
        self.writer.write(data)
        await self.writer.drain()

    async def receive(self, timeout: float = 10.0) -> dict[str, Any]:
        line = await asyncio.wait_for(self.reader.readline(), timeout)
        assert line, "the server closed the connection"
        value: dict[str, Any] = json.loads(line)
        return value

    async def request(self, method: str, params: dict[str, Any] | None = None, request_id: Any = 1) -> dict[str, Any]:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        return await self.receive()

    async def initialize(self, version: str = "2025-06-18") -> dict[str, Any]:
        response = await self.request(
            "initialize",
            {
                "protocolVersion": version,
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            },
            request_id=0,
        )
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return response

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()
