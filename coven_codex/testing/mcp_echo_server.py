"""A tiny stdio MCP server (standard library only, starts in milliseconds) for tests.

Codex launches it from ``[mcp_servers.<name>]`` with ``command = sys.executable`` and
``args = ["-m", "coven_codex.testing.mcp_echo_server"]`` (or :func:`mcp_server_entry`).
Tools: ``echo(text)`` → ``"echo: <text>"``; ``add(a, b)`` → the sum; ``fail(reason)`` →
a result with ``isError: true``.

Why not the official SDK: Codex 0.169 sends its first model request without waiting for
slow MCP servers, and importing the SDK takes about a second, so its tools were missing
from the first turn. A fast server makes tool tests deterministic.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, TextIO

SERVER_INFO = {"name": "coven-echo", "version": "1.0.0"}
TOOLS: list[dict[str, Any]] = [
    {
        "name": "echo",
        "description": "Return the text, prefixed with 'echo: '.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    },
    {
        "name": "add",
        "description": "Add two integers.",
        "inputSchema": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
    {
        "name": "fail",
        "description": "Always fails with the given reason.",
        "inputSchema": {"type": "object", "properties": {"reason": {"type": "string"}}, "required": ["reason"]},
    },
]


def _text(text: str, *, is_error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    if name == "echo":
        return _text(f"echo: {arguments.get('text', '')}")
    if name == "add":
        try:
            return _text(str(int(arguments["a"]) + int(arguments["b"])))
        except (KeyError, TypeError, ValueError) as exc:
            return _text(f"add needs integers a and b: {exc}", is_error=True)
    if name == "fail":
        return _text(str(arguments.get("reason", "failed as asked")), is_error=True)
    return _text(f"unknown tool {name!r}", is_error=True)


def handle(message: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON-RPC response to ``message`` (``None`` for notifications)."""
    if "id" not in message:
        return None
    method = message.get("method")
    params = message.get("params") or {}
    handlers: dict[str, Callable[[], dict[str, Any]]] = {
        "initialize": lambda: {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": SERVER_INFO,
        },
        "ping": dict,
        "tools/list": lambda: {"tools": TOOLS},
        "tools/call": lambda: _call(str(params.get("name")), params.get("arguments") or {}),
    }
    handler = handlers.get(str(method))
    if handler is None:
        return {
            "jsonrpc": "2.0",
            "id": message["id"],
            "error": {"code": -32601, "message": f"method not found: {method}"},
        }
    return {"jsonrpc": "2.0", "id": message["id"], "result": handler()}


def serve(stdin: TextIO, stdout: TextIO) -> None:
    """Answer JSON-RPC messages read line by line from ``stdin`` on ``stdout`` until end of input."""
    for line in stdin:
        if not line.strip():
            continue
        try:
            message = json.loads(line)
        except ValueError:
            response: dict[str, Any] | None = {
                "jsonrpc": "2.0",
                "id": None,
                "error": {"code": -32700, "message": "parse error"},
            }
        else:
            response = handle(message) if isinstance(message, dict) else None
        if response is not None:
            stdout.write(json.dumps(response) + "\n")
            stdout.flush()


def mcp_server_entry(*, python: str = sys.executable) -> dict[str, Any]:
    """The ``[mcp_servers.<name>]`` table that launches this server."""
    return {
        "command": python,
        "args": ["-m", "coven_codex.testing.mcp_echo_server"],
        "default_tools_approval_mode": "approve",
        "startup_timeout_sec": 20,
        "required": True,  # Codex waits for it before the first model request (see mcp/codex_entry.py)
    }


if __name__ == "__main__":
    serve(sys.stdin, sys.stdout)
