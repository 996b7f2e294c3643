"""The spell server: MCP over a Unix domain socket in a private directory.

One server per Codex session (see docs/writing-spells.md): its own socket, its own secret; the
:class:`SpellRegistry` can be shared by all. Usage::

    async with SpellServer(registry, label="conversation-1") as server:
        entry = codex_mcp_entry(server.socket_path, server.secret, codex_version)
        ...  # run Codex; the server answers in the background until the block ends
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import stat
import tempfile
from pathlib import Path
from types import TracebackType

from coven_codex.mcp.connection import Connection, ConnectionLimits
from coven_codex.mcp.registry import SpellRegistry
from coven_codex.mcp.session import McpSession, SpellCallHook
from coven_codex.mcp.threads import SpellThreads

log = logging.getLogger(__name__)

SUN_PATH_MAX = 107  # bytes in sockaddr_un.sun_path on Linux, less the terminating NUL
SOCKET_NAME = "mcp.sock"


class SpellServerError(RuntimeError):
    """The server cannot start; the message says why and what to do."""


def default_socket_parent() -> Path:
    """``$XDG_RUNTIME_DIR`` when usable (private, short), else the system temp directory."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime) and os.access(runtime, os.W_OK | os.X_OK):
        return Path(runtime)
    return Path(tempfile.gettempdir())


class SpellServer:
    """Serves ``registry`` over MCP on ``socket_path`` while the ``async with`` block runs.

    ``socket_dir``: a directory for the socket; created 0700 if missing, tightened to 0700 if
    looser, refused if another user owns it. Default: a fresh private directory under
    ``$XDG_RUNTIME_DIR`` or ``/tmp`` (removed again at the end). ``secret``: the session secret
    shims must present; generated when not given. ``spell_threads``: sync spells running at once;
    ``spell_thread_cap``: threads in all, counting those stuck in timed-out spells (default 4x).
    """

    def __init__(
        self,
        registry: SpellRegistry,
        *,
        socket_dir: Path | None = None,
        socket_name: str = SOCKET_NAME,
        secret: str | None = None,
        label: str = "",
        server_name: str = "coven",
        instructions: str | None = None,
        limits: ConnectionLimits | None = None,
        spell_threads: int = 8,
        spell_thread_cap: int | None = None,
        page_size: int = 100,
        on_call: SpellCallHook | None = None,
    ) -> None:
        """``on_call``: told of the end of every spell call (:class:`~coven_codex.mcp.session.McpSession`)."""
        if secret is not None and len(secret) < 16:
            raise SpellServerError("the session secret must be at least 16 characters")
        self.registry = registry
        self.secret = secret or secrets.token_urlsafe(32)
        self.label = label
        self._server_name = server_name
        self._instructions = instructions
        self._requested_dir = socket_dir
        self._socket_name = socket_name
        self._limits = limits or ConnectionLimits()
        self._spell_threads = spell_threads
        self._spell_thread_cap = spell_thread_cap
        self._page_size = page_size
        self._on_call = on_call
        self._socket_dir: Path | None = None
        self._created_dir = False
        self._server_bound = False
        self._server: asyncio.Server | None = None
        self._executor: SpellThreads | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def socket_path(self) -> Path:
        """The Unix socket the server listens on; :class:`SpellServerError` when it is not running."""
        if self._socket_dir is None:
            raise SpellServerError("the spell server is not running; use it in `async with`")
        return self._socket_dir / self._socket_name

    @property
    def connection_count(self) -> int:
        """How many shim connections are being served."""
        return len(self._connections)

    async def __aenter__(self) -> SpellServer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Bind the socket and start serving; on failure, undo what was done and re-raise."""
        try:
            await self._start()
        except BaseException:
            await self.close()
            raise

    async def _start(self) -> None:
        self._socket_dir, self._created_dir = _prepare_dir(self._requested_dir)
        path = self.socket_path
        if len(os.fsencode(path)) > SUN_PATH_MAX:
            raise SpellServerError(
                f"socket path {path} is {len(os.fsencode(path))} bytes, over the {SUN_PATH_MAX}-byte "
                "limit of Unix sockets; pass a shorter socket_dir (or none, for a private temp dir)"
            )
        _remove_stale_socket(path)
        self._executor = SpellThreads(
            self._spell_threads,
            name=f"spell-{self.label}" if self.label else "spell",
            max_threads=self._spell_thread_cap,
        )
        self._server = await asyncio.start_unix_server(self._on_connect, path=str(path))
        self._server_bound = True
        os.chmod(path, 0o600)
        log.info(
            "spell server%s listening on %s with %d spells",
            f" {self.label!r}" if self.label else "",
            path,
            len(self.registry),
        )

    async def close(self) -> None:
        """Stop listening, end every connection (cancelling its calls), remove the socket."""
        if self._server is not None:
            self._server.close()
            self._server = None
        tasks = list(self._connections)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        if self._socket_dir is not None:
            if self._server_bound:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.socket_path)
                self._server_bound = False
            if self._created_dir:
                with contextlib.suppress(OSError):
                    os.rmdir(self._socket_dir)
            self._socket_dir = None

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            session = McpSession(
                self.registry,
                executor=self._executor,
                server_name=self._server_name,
                label=self.label,
                page_size=self._page_size,
                instructions=self._instructions,
                on_call=self._on_call,
            )
            await Connection(reader, writer, session, self.secret, self._limits).run()
        except asyncio.CancelledError:
            # close() cancelled us and awaits us; ending normally keeps asyncio's stream
            # callback from logging the cancellation as an error.
            return
        finally:
            self._connections.discard(task)


def _prepare_dir(requested: Path | None) -> tuple[Path, bool]:
    if requested is None:
        return Path(tempfile.mkdtemp(prefix="coven-mcp-", dir=default_socket_parent())), True
    path = Path(requested)
    created = False
    try:
        path.mkdir(mode=0o700, parents=True)
        created = True
    except FileExistsError:
        pass
    except OSError as exc:
        raise SpellServerError(f"cannot create the socket directory {path}: {exc.strerror}") from None
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise SpellServerError(f"socket directory {path} is not a directory (or is a symlink); pick another")
    if info.st_uid != os.getuid():
        raise SpellServerError(
            f"socket directory {path} belongs to uid {info.st_uid}, not to you; pick a directory of your own"
        )
    if stat.S_IMODE(info.st_mode) != 0o700:
        log.info("tightening socket directory %s to mode 0700", path)
        os.chmod(path, 0o700)
    return path, created


def _remove_stale_socket(path: Path) -> None:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise SpellServerError(f"{path} exists and is not a socket; remove it or pick another socket_dir")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except ConnectionRefusedError:
        log.info("removing stale socket %s", path)
        os.unlink(path)
        return
    except OSError:
        os.unlink(path)
        return
    finally:
        probe.close()
    raise SpellServerError(f"another process already serves {path}; stop it or pick another socket_dir")
