"""Files out: the built-in spell ``send_file(path, caption)`` every daemon serves.

Codex names a file of its conversation's working directory; the spell checks it and copies it
into the journal's attachments folder (``<journal>.attachments/out/``, named by its SHA-256), then
writes one ``file`` entry for the conversation; adapters upload it (docs/journal-protocol.md,
*Files out*; docs/adapters.md).

The checks (:func:`locate` then :func:`read_checked`):

- the path, relative to the conversation's ``cwd`` (or absolute), has no ``..`` and resolves
  (symbolic links resolved) to a file inside that ``cwd``;
- it is opened without following a last symbolic link, and what was opened is checked, not the
  name: a regular file (no directory, FIFO, device or socket), still inside the ``cwd`` (a file or
  folder swapped for a link after :func:`locate` is caught), at most ``max_file_bytes`` long; the
  bytes read are those sent;
- its kind, by its bytes (the name is not trusted), is one of :data:`FILE_KINDS`.

The entry's id comes from the call (the conversation, the turn, the path, the caption and the
bytes): the same call twice writes one entry.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, NamedTuple

from pydantic import BaseModel, Field

from coven_codex.attachments.store import sniff, write_stored
from coven_codex.entries import Attachment, FileEntry
from coven_codex.journal import START, Interest, Journal, JournalRecord, SegmentRemoved
from coven_codex.mcp.context import SpellContext
from coven_codex.mcp.invoke import SpellError
from coven_codex.mcp.registry import SpellRegistry

MAX_FILE_BYTES = 10 * 1024 * 1024
"""The default of the ``max_file_bytes`` setting."""
OUT_FOLDER = "out"
"""The sub-folder of the journal's attachments folder the sent files are copied into."""
SEND_FILE_TIMEOUT = 60.0

FILE_KINDS: dict[str, str] = {
    "png": "image/png",
    "jpg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
    "pdf": "application/pdf",
    "zip": "application/zip",
    "gz": "application/gzip",
    "txt": "text/plain",
}
"""The kinds a sent file may be, by its bytes (extension of the stored copy → media type): PNG, JPEG,
GIF, WebP, PDF, ZIP (and the formats built on it), gzip, and UTF-8 text without NUL bytes."""


SENT_NAME = re.compile(r"^[0-9a-f]{64}\.(" + "|".join(FILE_KINDS) + r")$")
"""The name of a sent file's copy in ``<journal>.attachments/out/``."""


class FileRefused(ValueError):
    """A file ``send_file`` will not send; the message says which, why and what to do."""


@dataclass(frozen=True, slots=True)
class OutgoingFile:
    """A checked file: its bytes, the name it is shown under, its kind."""

    data: bytes
    name: str
    extension: str
    media_type: str

    @property
    def sha256(self) -> str:
        """The SHA-256 of :attr:`data`, in hex."""
        return hashlib.sha256(self.data).hexdigest()


def sniff_file(data: bytes) -> str | None:
    """The extension of an allowed kind (:data:`FILE_KINDS`) for ``data``, by its bytes; None otherwise."""
    image = sniff(data[:16])
    if image is not None:
        return image
    if data.startswith(b"%PDF-"):
        return "pdf"
    if data.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return "zip"
    if data.startswith(b"\x1f\x8b"):
        return "gz"
    if b"\x00" not in data:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return None
        return "txt"
    return None


def locate(path: str, root: Path) -> Path:
    """The file ``path`` names (relative to ``root``, or absolute), symbolic links resolved, inside
    ``root``; raises :class:`FileRefused`."""
    shown = repr(path[:200])
    if not path or "\x00" in path:
        raise FileRefused("send_file needs the path of a file in the conversation's working directory")
    given = Path(path)
    if ".." in given.parts:
        raise FileRefused(f"the path {shown} has '..'; give a path inside the working directory {root}")
    candidate = given if given.is_absolute() else root / given
    try:
        real = candidate.resolve(strict=True)
    except (OSError, RuntimeError):
        raise FileRefused(f"there is no file {shown} in the working directory {root}") from None
    if not real.is_relative_to(root.resolve()):
        raise FileRefused(
            f"{shown} is outside the working directory {root} (symbolic links resolved); "
            "only files inside it can be sent: copy the file there first"
        )
    return real


def read_checked(located: Path, root: Path, *, max_bytes: int, name: str | None = None) -> OutgoingFile:
    """Open ``located`` (from :func:`locate`) and check what was opened; raises :class:`FileRefused`."""
    shown = repr((name or located.name)[:200])
    try:
        fd = os.open(located, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError as exc:
        raise FileRefused(f"{shown} cannot be opened ({exc.strerror or exc}); it may have been moved") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise FileRefused(f"{shown} is a directory; send one file (zip the folder first)")
        if not stat.S_ISREG(info.st_mode):
            raise FileRefused(f"{shown} is not a regular file (a FIFO, device or socket); send a regular file")
        opened = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if not opened.is_relative_to(root.resolve()):
            raise FileRefused(f"{shown} was moved outside the working directory {root} while it was checked")
        if info.st_size > max_bytes:
            raise FileRefused(_too_big(shown, info.st_size, max_bytes))
        chunks: list[bytes] = []
        size = 0
        while size <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > max_bytes:
            raise FileRefused(_too_big(shown, size, max_bytes))
    except OSError as exc:
        raise FileRefused(f"{shown} cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if not data:
        raise FileRefused(f"{shown} is empty; there is nothing to send")
    extension = sniff_file(data)
    if extension is None:
        raise FileRefused(
            f"{shown} is not a kind that can be sent (by its content: PNG, JPEG, GIF, WebP, PDF, ZIP, gzip "
            "or UTF-8 text); convert it or pack it in a zip"
        )
    return OutgoingFile(data, name or located.name, extension, FILE_KINDS[extension])


def store_outgoing(folder: Path, sent: OutgoingFile) -> Attachment:
    """Copy ``sent`` into ``folder`` (the journal's attachments folder) as ``out/<sha256>.<ext>``;
    the ``file`` entry's attachment for it."""
    stored = folder / OUT_FOLDER / f"{sent.sha256}.{sent.extension}"
    write_stored(stored, sent.data)
    return Attachment.model_validate(
        {
            "url": stored.as_uri(),
            "media_type": sent.media_type,
            "name": sent.name,
            "size": len(sent.data),
            "sha256": sent.sha256,
        }
    )


def _too_big(shown: str, size: int, max_bytes: int) -> str:
    return (
        f"{shown} is {size} bytes long; files sent to the chat may be at most {max_bytes} bytes "
        "(max_file_bytes): compress it or send a part"
    )


class ThreadHome(NamedTuple):
    """Where a Codex thread of this daemon lives: the conversation holding it and its working directory."""

    conversation: str
    cwd: Path


ThreadHomes = Callable[[str], ThreadHome | None]
"""The :class:`ThreadHome` of a Codex thread id, ``None`` when no conversation of this daemon holds
it (the daemon asks its conversations: their state names their thread and its directory, which a
``/project``, a take-over or a ``cwd`` set)."""

FILE_INTEREST = Interest(frozenset({"file"}))


class _SentFiles:
    """The ids of the ``file`` entries the journal holds: read whole at the first call, then on from
    where the last call ended (only ``file`` lines are decoded)."""

    def __init__(self, journal: Journal) -> None:
        self._journal = journal
        self._read_to = START
        self.ids: set[str] = set()

    async def catch_up(self) -> None:
        end = await self._journal.end_position()
        try:
            items = await self._journal.read(self._read_to, end, interest=FILE_INTEREST)
        except SegmentRemoved:  # (retention removed what was read: what is left is read again)
            items = await self._journal.read(START, end, interest=FILE_INTEREST)
        for item in items:
            if isinstance(item, JournalRecord) and isinstance(item.entry, FileEntry) and item.entry.id:
                self.ids.add(item.entry.id)
        self._read_to = max(self._read_to, end)


class SentFile(BaseModel):
    """What ``send_file`` returns: the file as it was sent."""

    name: str
    media_type: str
    size: int
    sha256: str
    entry_id: str


def file_spells(journal: Journal, *, homes: ThreadHomes, folder: Path, max_bytes: int) -> SpellRegistry:
    """The built-in spell ``send_file``, writing to ``journal`` and copying into ``folder`` (the
    journal's attachments folder, :func:`~coven_codex.attachments.store.uploads_dir`); ``homes``
    says which conversation holds the calling thread, and where it works."""
    registry = SpellRegistry(default_timeout=SEND_FILE_TIMEOUT)
    lock = asyncio.Lock()
    sent_files = _SentFiles(journal)

    async def send_file(
        path: Annotated[
            str, Field(description="The file, relative to your working directory (or absolute, inside it).")
        ],
        caption: Annotated[str, Field(max_length=2000, description="A line shown with the file.")] = "",
        context: SpellContext | None = None,
    ) -> SentFile:
        """Send a file of your working directory to the person you talk with in the chat (an upload on
        Slack, Discord, Telegram, a download link on the web page). PNG, JPEG, GIF, WebP, PDF, ZIP,
        gzip or UTF-8 text, within the size limit."""
        thread_id = context.thread_id if context is not None else None
        if thread_id is None:
            raise SpellError("Codex did not say which thread calls send_file (Codex 0.169 or newer says it)")
        home = homes(thread_id)
        if home is None:
            raise SpellError(f"no conversation of this daemon has the Codex thread {thread_id}")
        try:
            located = await asyncio.to_thread(locate, path, home.cwd)
            sent = await asyncio.to_thread(read_checked, located, home.cwd, max_bytes=max_bytes)
        except FileRefused as exc:
            raise SpellError(str(exc)) from None
        turn_id = context.turn_id if context is not None else None
        call = "\x00".join((home.conversation, thread_id, turn_id or "", path, caption, sent.sha256))
        entry_id = "file-" + hashlib.sha256(call.encode()).hexdigest()[:32]
        async with lock:  # one call at a time: the journal is looked at and appended to together
            await sent_files.catch_up()
            if entry_id not in sent_files.ids:
                attachment = await asyncio.to_thread(store_outgoing, folder, sent)
                await journal.append(
                    FileEntry(
                        id=entry_id,
                        conversation=home.conversation,
                        text=caption,
                        attachment=attachment,
                        thread_id=thread_id,
                        turn_id=turn_id,
                    )
                )
                sent_files.ids.add(entry_id)
        return SentFile(
            name=sent.name, media_type=sent.media_type, size=len(sent.data), sha256=sent.sha256, entry_id=entry_id
        )

    registry.register(send_file)
    return registry
