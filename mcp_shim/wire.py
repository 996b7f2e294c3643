"""The socket-side protocol between the shim and the daemon (shared by both ends).

Framing: UTF-8 JSON, one message per line, each line ended by ``\\n`` (a message never holds a
raw newline; JSON escapes them). This is the same framing as MCP's stdio transport, so the
shim relays bytes without parsing them.

Handshake, before any JSON-RPC: the shim sends one line
``{"coven": "hello", "version": 1, "secret": "<per-session secret>"}``; the daemon answers
``{"coven": "welcome", "version": 1}`` or ``{"coven": "refused", "reason": "..."}`` and then
closes the connection. Only after a welcome does JSON-RPC flow.
"""

from __future__ import annotations

import json
from typing import Any

WIRE_VERSION = 1
SECRET_ENV = "COVEN_MCP_SECRET"
SOCKET_ENV = "COVEN_MCP_SOCKET"
HANDSHAKE_MAX_BYTES = 4096


def hello(secret: str) -> bytes:
    return _line({"coven": "hello", "version": WIRE_VERSION, "secret": secret})


def welcome() -> bytes:
    return _line({"coven": "welcome", "version": WIRE_VERSION})


def refused(reason: str) -> bytes:
    return _line({"coven": "refused", "reason": reason})


def parse_line(line: bytes) -> dict[str, Any] | None:
    """The handshake object on ``line``, or None when it is not one."""
    try:
        value = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(value, dict) or not isinstance(value.get("coven"), str):
        return None
    return value


def _line(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode() + b"\n"
