"""Connect to the daemon, hand-shake, then relay bytes both ways until either side closes.

Uses the C modules ``_socket`` and ``_thread`` directly: ``socket`` and ``threading`` would
import ``selectors``, ``enum``, ``functools``... and double the shim's start-up time.
"""

from __future__ import annotations

import _socket
import _thread
import os
import sys

from mcp_shim import wire

CHUNK = 1 << 20
HANDSHAKE_TIMEOUT = 10.0
DRAIN_GRACE = 2.0


class ShimError(Exception):
    """The daemon cannot be used; the message is for the user (stderr) and Codex (MCP error)."""


def connect(socket_path: str, secret: str) -> _socket.socket:
    """Open the daemon's socket and complete the handshake; raise ShimError if impossible."""
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(HANDSHAKE_TIMEOUT)
        try:
            sock.connect(socket_path)
        except FileNotFoundError:
            raise ShimError(
                f"the coven daemon is not running: its socket {socket_path} does not exist "
                "(start it with `coven-codex run`, which also rewrites this MCP entry)"
            ) from None
        except ConnectionRefusedError:
            raise ShimError(
                f"the coven daemon is not running: nothing listens on {socket_path} (start it with `coven-codex run`)"
            ) from None
        except PermissionError:
            raise ShimError(
                f"cannot open the coven daemon's socket {socket_path}: permission denied "
                "(run Codex as the user who runs the daemon)"
            ) from None
        except OSError as exc:
            raise ShimError(f"cannot connect to the coven daemon at {socket_path}: {exc.strerror}") from None
        sock.sendall(wire.hello(secret))
        answer = _read_line(sock)
        reply = wire.parse_line(answer) if answer else None
        if reply is None:
            raise ShimError(
                f"the coven daemon at {socket_path} closed the connection during the handshake "
                "(is it a coven daemon of the same version?)"
            )
        if reply.get("coven") != "welcome":
            reason = str(reply.get("reason", "no reason given"))
            raise ShimError(
                f"the coven daemon refused this shim: {reason} (the MCP entry in Codex's config is "
                "stale; restart `coven-codex run` so it writes a fresh one)"
            )
        sock.settimeout(None)
        return sock
    except BaseException:
        sock.close()
        raise


def _read_line(sock: _socket.socket) -> bytes:
    data = b""
    while b"\n" not in data and len(data) < wire.HANDSHAKE_MAX_BYTES:
        try:
            chunk = sock.recv(wire.HANDSHAKE_MAX_BYTES)
        except TimeoutError:
            raise ShimError("the coven daemon did not answer the handshake in time") from None
        except OSError:
            return b""
        if not chunk:
            return data if b"\n" in data else b""
        data += chunk
    return data.split(b"\n", 1)[0]


def relay(sock: _socket.socket, stdin_fd: int = 0, stdout_fd: int = 1) -> int:
    """Copy stdin to the socket and the socket to stdout; return the exit status."""
    stdin_closed = [False]
    reader_done = _thread.allocate_lock()
    reader_done.acquire()

    def socket_to_stdout() -> None:
        try:
            while True:
                data = sock.recv(CHUNK)
                if not data:
                    break
                _write_all(stdout_fd, data)
        except OSError:
            pass
        if not stdin_closed[0]:
            sys.stderr.write("coven-mcp-shim: the coven daemon closed the connection; exiting\n")
            sys.stderr.flush()
            os._exit(1)  # the main thread is blocked reading stdin; nothing else to clean up
        reader_done.release()

    _thread.start_new_thread(socket_to_stdout, ())
    try:
        while True:
            data = os.read(stdin_fd, CHUNK)
            if not data:
                break
            sock.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        reader_done.acquire(timeout=DRAIN_GRACE)
        return 1
    except KeyboardInterrupt:
        return 130
    stdin_closed[0] = True
    try:  # noqa: SIM105  # contextlib would add ~5 ms to the shim's start-up
        sock.shutdown(_socket.SHUT_WR)
    except OSError:
        pass
    reader_done.acquire(timeout=DRAIN_GRACE)
    sock.close()
    return 0


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
