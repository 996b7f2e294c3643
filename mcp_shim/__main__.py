"""``coven-mcp-shim`` / ``python -m mcp_shim --socket PATH`` (secret in ``$COVEN_MCP_SECRET``).

Codex runs it as ``python -S .../mcp_shim/__main__.py`` with the package's parent directory on
``PYTHONPATH``: no ``site`` and no ``runpy`` keep the start-up near the interpreter's own.
Imports are kept to ``os``, ``sys``, ``socket`` and ``threading`` on the normal path.
"""

from __future__ import annotations

import os
import sys

from mcp_shim import wire
from mcp_shim.relay import ShimError, connect, relay

USAGE = (
    "usage: coven-mcp-shim [--socket PATH]\n"
    "Relays MCP (newline-delimited JSON-RPC on stdin/stdout) to the coven daemon.\n"
    f"The socket defaults to ${wire.SOCKET_ENV}; the session secret is read from ${wire.SECRET_ENV}.\n"
    "Codex launches this for you from the [mcp_servers.coven] entry `coven-codex run` writes.\n"
)
DAEMON_UNAVAILABLE = -32000
MAX_UNANSWERED_LINE = 1 << 20


def _parse(argv: list[str]) -> str | None:
    socket_path = os.environ.get(wire.SOCKET_ENV)
    args = argv[:]
    while args:
        arg = args.pop(0)
        if arg in ("-h", "--help"):
            sys.stdout.write(USAGE)
            raise SystemExit(0)
        if arg == "--version":
            sys.stdout.write(f"coven-mcp-shim {wire.SHIM_VERSION}\n")
            raise SystemExit(0)
        if arg == "--socket" and args:
            socket_path = args.pop(0)
        elif arg.startswith("--socket="):
            socket_path = arg.split("=", 1)[1]
        else:
            sys.stderr.write(f"coven-mcp-shim: unexpected argument {arg!r}\n{USAGE}")
            raise SystemExit(2)
    return socket_path


def answer_with_error(message: str, stdin_fd: int = 0, stdout_fd: int = 1) -> None:
    """Answer every request the client sends with an MCP error saying ``message``, until stdin closes.

    Clients probe before they initialise (the official Python SDK sends ``server/discover``
    first, then falls back to ``initialize``): every request must get the explanation, not only
    the first, or the client shows the user a bare "connection closed".
    """
    import json  # noqa: PLC0415  # only on this error path: json costs ~5 ms of start-up

    error = {"code": DAEMON_UNAVAILABLE, "message": message}
    buffer = b""
    while True:
        try:
            chunk = os.read(stdin_fd, 1 << 16)
        except OSError:
            return
        if not chunk:
            return
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        if len(buffer) > MAX_UNANSWERED_LINE:
            buffer = b""  # nothing useful in an endless line; keep memory bounded
        for line in lines:
            try:
                request = json.loads(line)
            except ValueError:
                continue
            if isinstance(request, dict) and "method" in request and "id" in request:
                reply = {"jsonrpc": "2.0", "id": request["id"], "error": error}
                try:
                    os.write(stdout_fd, json.dumps(reply).encode() + b"\n")
                except OSError:
                    return


def main(argv: list[str] | None = None) -> int:
    """Connect to the daemon's socket and relay stdin/stdout to it; returns the exit code (1 if it cannot connect)."""
    socket_path = _parse(sys.argv[1:] if argv is None else list(argv))
    secret = os.environ.get(wire.SECRET_ENV, "")
    try:
        if not socket_path:
            raise ShimError(
                f"no daemon socket given (pass --socket PATH or set ${wire.SOCKET_ENV}); "
                "let `coven-codex run` write Codex's MCP entry"
            )
        if not secret:
            raise ShimError(
                f"${wire.SECRET_ENV} is not set, so the daemon would refuse this shim; "
                "let `coven-codex run` write Codex's MCP entry"
            )
        sock = connect(socket_path, secret)
    except ShimError as exc:
        sys.stderr.write(f"coven-mcp-shim: {exc}\n")
        sys.stderr.flush()
        answer_with_error(f"coven spells are unavailable: {exc}")
        return 1
    return relay(sock)


if __name__ == "__main__":
    sys.exit(main())
