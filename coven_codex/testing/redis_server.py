"""A real ``redis-server`` on a free loopback port, for tests and benchmarks (never a fake).

:class:`RedisServer` starts Debian's ``redis-server`` (``/usr/bin/redis-server``, 7.0 or newer)
with its data in a directory of its own, append-only file on by default, and can kill it
(``SIGKILL``), stop it (``SIGTERM``), freeze it (``SIGSTOP``: it accepts connections and answers
nothing, as a hung or partitioned Redis looks) and start it again on the same port and data, as a
Redis restart or crash looks to its clients::

    with RedisServer(tmp_path / "redis") as server:
        journal = RedisJournal.from_url(server.url(key="chat"))
        ...
        server.kill()
        server.start()   # same port, same data (AOF)
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Final

READY_MARK: Final = b"Ready to accept connections"
START_TIMEOUT: Final = 30.0
STOP_TIMEOUT: Final = 30.0
PORT_ATTEMPTS: Final = 5


class RedisServerError(RuntimeError):
    """``redis-server`` is missing or did not start; the message has its last log lines."""


def redis_server_binary() -> str:
    """The ``redis-server`` to run (``$REDIS_SERVER`` or the one on ``PATH``)."""
    found = os.environ.get("REDIS_SERVER") or shutil.which("redis-server") or "/usr/bin/redis-server"
    if not Path(found).exists():
        raise RedisServerError(
            "redis-server is not installed: install it (Debian: apt-get install -y redis-server) or set $REDIS_SERVER"
        )
    return found


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class RedisServer:
    """One ``redis-server`` process on 127.0.0.1, with its data (AOF, RDB) and log in ``directory``."""

    def __init__(self, directory: Path, *, appendonly: bool = True, extra_args: tuple[str, ...] = ()) -> None:
        self.directory = Path(directory)
        self.appendonly = appendonly
        self.extra_args = extra_args
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = self.directory / "redis.log"
        self._drain: threading.Thread | None = None

    def url(self, *, db: int = 0, key: str | None = None) -> str:
        """``redis://127.0.0.1:PORT/DB`` with ``?key=KEY`` when given: a journal name."""
        base = f"redis://127.0.0.1:{self.port}/{db}"
        return base if key is None else f"{base}?key={key}"

    def _command(self) -> list[str]:
        return [
            redis_server_binary(),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.directory),
            "--appendonly",
            "yes" if self.appendonly else "no",
            "--appendfsync",
            "everysec",
            "--save",
            "",
            "--daemonize",
            "no",
            "--logfile",
            "",
            *self.extra_args,
        ]

    def start(self) -> None:
        """Start the server (again, on the same port and data once it ran) and wait until it accepts clients."""
        if self.process is not None and self.process.poll() is None:
            raise RedisServerError(f"redis-server on port {self.port} is already running")
        self.directory.mkdir(parents=True, exist_ok=True)
        attempts = 1 if self.port else PORT_ATTEMPTS
        for attempt in range(attempts):
            if not self.port or attempt:
                self.port = free_port()
            error = self._start_once()
            if error is None:
                return
            if b"Address already in use" not in error or attempt == attempts - 1:
                raise RedisServerError(
                    f"redis-server did not start on port {self.port}: " + error.decode(errors="replace")[-2000:]
                )

    def _start_once(self) -> bytes | None:
        """Start one process; None once it is ready, else what it logged before it died."""
        process = subprocess.Popen(
            self._command(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        assert process.stdout is not None
        log = self.log_path.open("ab")
        seen = b""
        deadline = time.monotonic() + START_TIMEOUT
        while READY_MARK not in seen:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                process.kill()
                process.wait()
                log.close()
                return seen + b"\n(no 'Ready to accept connections' within the time limit)"
            readable, _, _ = select.select([process.stdout], [], [], remaining)
            if not readable:
                continue
            chunk = os.read(process.stdout.fileno(), 65536)
            if not chunk:
                process.wait()
                log.close()
                return seen
            seen += chunk
            log.write(chunk)
        log.flush()
        self.process = process
        self._drain = threading.Thread(target=_drain, args=(process.stdout, log), daemon=True)
        self._drain.start()
        return None

    def _finish(self, sig: signal.Signals) -> None:
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)  # (a paused server must run to exit on SIGTERM)
            process.send_signal(sig)
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._drain is not None:
            self._drain.join(STOP_TIMEOUT)
        self.process = None
        self._drain = None

    def kill(self) -> None:
        """``SIGKILL`` the server (a crash: what the AOF had not flushed is lost, up to a second)."""
        self._finish(signal.SIGKILL)

    def stop(self) -> None:
        """``SIGTERM`` the server (it flushes its AOF and exits)."""
        self._finish(signal.SIGTERM)

    def pause(self) -> None:
        """``SIGSTOP`` the server: connections stay open and nothing is answered until :meth:`resume`."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """``SIGCONT`` a paused server: it answers what was sent meanwhile, keys past their time expired."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)

    def restart(self) -> None:
        """Stop, then start again on the same port and data."""
        self.stop()
        self.start()

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def _drain(stream: IO[bytes], log: IO[bytes]) -> None:
    """Copy the server's output to its log until it exits (a full pipe would stop the server)."""
    with contextlib.closing(log), contextlib.closing(stream):
        for chunk in iter(lambda: os.read(stream.fileno(), 65536), b""):
            log.write(chunk)
            log.flush()
