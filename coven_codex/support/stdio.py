"""This process's stdin and stdout as asyncio streams, whatever they are (``mcp-serve``'s transport).

``loop.connect_read_pipe``/``connect_write_pipe`` take pipes, sockets and character devices
(terminals) only; a regular file (``mcp-serve < requests.jsonl > answers.jsonl``) makes them
raise ``ValueError``, and ``/dev/null`` cannot be polled (the read transport fails in a callback
and never ends). :func:`stdio_streams` uses them where they apply and otherwise:

- reads a regular-file stdin through :class:`FileReadTransport` (a chunk at a time in a worker
  thread, paused while the reader holds more than its limit, as a pipe would be);
- writes to a regular-file stdout through :class:`FileWriteTransport`, which writes each chunk
  at once (a write to a regular file does not wait on a peer).

The writer's protocol is a :class:`asyncio.StreamReaderProtocol` (with a reader that is never
fed): it is the standard library protocol that implements everything
:class:`asyncio.StreamWriter` calls, ``drain`` (flow control) and ``wait_closed`` (a bare
``FlowControlMixin`` raises ``NotImplementedError`` there, which ended every ``mcp-serve``
session with a traceback).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import selectors
import stat
import sys
from collections.abc import AsyncIterator
from typing import BinaryIO

READ_CHUNK = 2**16


class StdioError(Exception):
    """This process has no usable stdout."""


def is_pipe_like(fd: int) -> bool:
    """True when asyncio's pipe transports work on ``fd``: a pipe, a socket or a character device
    that the event loop's selector can watch (a terminal can be, ``/dev/null`` cannot)."""
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)):
        return False
    with selectors.DefaultSelector() as selector:
        try:
            selector.register(fd, selectors.EVENT_READ | selectors.EVENT_WRITE)
        except OSError:  # EPERM: this file cannot be polled
            return False
    return True


class FileWriteTransport(asyncio.WriteTransport):
    """A write transport over a regular file: every write is done at once, nothing is buffered."""

    def __init__(self, loop: asyncio.AbstractEventLoop, file: BinaryIO, protocol: asyncio.BaseProtocol) -> None:
        super().__init__({"pipe": file})
        self._loop = loop
        self._fd = file.fileno()
        self._protocol = protocol
        self._closing = False
        protocol.connection_made(self)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Write all of ``data`` to the file (``OSError``, e.g. a full disk, reaches the caller)."""
        if self._closing:
            raise RuntimeError("write to a closed file transport")
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def get_write_buffer_size(self) -> int:
        """Always 0: nothing is ever queued."""
        return 0

    def is_closing(self) -> bool:
        """True once :meth:`close` or :meth:`abort` was called."""
        return self._closing

    def close(self) -> None:
        """Stop writing (the file itself stays open: it is this process's stdout)."""
        if not self._closing:
            self._closing = True
            self._loop.call_soon(self._protocol.connection_lost, None)

    def abort(self) -> None:
        """The same as :meth:`close`: there is never anything queued to drop."""
        self.close()

    def can_write_eof(self) -> bool:
        """False: a file has no end to signal."""
        return False


class FileReadTransport(asyncio.ReadTransport):
    """A read transport over a regular file: read to its end, a chunk at a time, in a worker thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, file: BinaryIO, protocol: asyncio.Protocol) -> None:
        super().__init__({"pipe": file})
        self._fd = file.fileno()
        self._protocol = protocol
        self._reading = asyncio.Event()
        self._reading.set()
        self._closing = False
        protocol.connection_made(self)
        self._task = loop.create_task(self._pump(), name="stdin-file")

    async def _pump(self) -> None:
        try:
            while True:
                await self._reading.wait()
                chunk = await asyncio.to_thread(os.read, self._fd, READ_CHUNK)
                if not chunk:
                    break
                self._protocol.data_received(chunk)
        except OSError as exc:
            self._lost(exc)
            return
        self._protocol.eof_received()
        self._lost(None)

    def _lost(self, exc: Exception | None) -> None:
        if not self._closing:
            self._closing = True
            self._protocol.connection_lost(exc)

    def pause_reading(self) -> None:
        """Read no more until :meth:`resume_reading` (the reader's buffer is full)."""
        self._reading.clear()

    def resume_reading(self) -> None:
        """Read on."""
        self._reading.set()

    def is_reading(self) -> bool:
        """False while paused or once closed."""
        return self._reading.is_set() and not self._closing

    def is_closing(self) -> bool:
        """True once closed or at the end of the file."""
        return self._closing

    def close(self) -> None:
        """Stop reading (a read under way in the worker thread finishes and is dropped)."""
        self._task.cancel()
        self._lost(None)

    async def finished(self) -> None:
        """Wait until reading has stopped (after :meth:`close` or the end of the file)."""
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


@contextlib.asynccontextmanager
async def stdio_streams(*, limit: int) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """``sys.stdin`` as a reader (lines up to ``limit`` bytes) and ``sys.stdout`` as a writer."""
    loop = asyncio.get_running_loop()
    if sys.stdout is None:  # fd 1 was closed when Python started
        raise StdioError("stdout is closed; give this command a stdout to answer on (a pipe or a file)")
    stdout = sys.stdout.buffer
    stdout.flush()
    stdout_is_pipe = is_pipe_like(stdout.fileno())
    reader = asyncio.StreamReader(limit=limit, loop=loop)
    read_transport: asyncio.ReadTransport | None = None
    stdin = sys.stdin.buffer if sys.stdin is not None else None
    if stdin is None:  # fd 0 was closed (`<&-`): no input at all
        reader.feed_eof()
    elif is_pipe_like(stdin.fileno()):
        read_transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
    else:
        read_transport = FileReadTransport(loop, stdin, asyncio.StreamReaderProtocol(reader))
    protocol = asyncio.StreamReaderProtocol(asyncio.StreamReader(loop=loop), loop=loop)
    transport: asyncio.WriteTransport
    if stdout_is_pipe:
        transport, _ = await loop.connect_write_pipe(lambda: protocol, stdout)
    else:
        transport = FileWriteTransport(loop, stdout, protocol)
    writer = asyncio.StreamWriter(transport, protocol, reader, loop)
    try:
        yield reader, writer
    finally:
        if read_transport is not None:
            read_transport.close()
            if isinstance(read_transport, FileReadTransport):
                await read_transport.finished()
        writer.close()
