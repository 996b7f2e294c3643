"""The socket-side protocol between the shim and the daemon (shared by both ends).

Framing: UTF-8 JSON, one message per line, each line ended by ``\\n`` (a message never holds a
raw newline; JSON escapes them). This is the same framing as MCP's stdio transport, so the
shim relays bytes without parsing them.

Handshake, before any JSON-RPC: the shim sends one line
``{"coven":"hello","version":1,"secret":"<per-session secret>"}``; the daemon answers
``{"coven":"welcome","version":1}`` or ``{"coven":"refused","reason":"..."}`` and then
closes the connection. Only after a welcome does JSON-RPC flow.

The shim's start-up time matters (Codex starts it for every session), so this module imports
nothing at load time: ``json`` (which pulls in ``re``) is imported only off the fast path.
"""

from __future__ import annotations

SHIM_VERSION = "0.1.0"
WIRE_VERSION = 1
SECRET_ENV = "COVEN_MCP_SECRET"
SOCKET_ENV = "COVEN_MCP_SOCKET"
HANDSHAKE_MAX_BYTES = 4096
WELCOME = b'{"coven":"welcome","version":1}\n'
_PLAIN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~+/=")


def hello(secret: str) -> bytes:
    """The shim's handshake line, carrying ``secret``."""
    if secret and set(secret) <= _PLAIN:
        return b'{"coven":"hello","version":1,"secret":"' + secret.encode() + b'"}\n'
    return _line({"coven": "hello", "version": WIRE_VERSION, "secret": secret})


def welcome() -> bytes:
    """The daemon's line accepting the shim."""
    return WELCOME


def refused(reason: str) -> bytes:
    """The daemon's line refusing the shim, with ``reason``."""
    return _line({"coven": "refused", "reason": reason})


def parse_line(line: bytes) -> dict[str, object] | None:
    """The handshake object on ``line``, or None when it is not one."""
    if line + b"\n" == WELCOME:
        return {"coven": "welcome", "version": WIRE_VERSION}
    import json  # noqa: PLC0415  # off the shim's fast path (see the module docstring)

    try:
        value = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(value, dict) or not isinstance(value.get("coven"), str):
        return None
    return value


def _line(value: dict[str, object]) -> bytes:
    import json  # noqa: PLC0415  # off the shim's fast path (see the module docstring)

    return json.dumps(value, separators=(",", ":")).encode() + b"\n"
