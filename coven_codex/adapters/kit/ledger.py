"""The delivery ledger: exactly-once posting across crashes.

An adapter reads the journal from a saved cursor and posts what it reads. A crash between posting
a message and saving the cursor would post it again on restart; the ledger closes that gap.

**Write-ahead.** Before posting the part ``n`` of entry ``E``, the runner writes an *intent*
record with a key derived only from ``(E, n)`` (:func:`delivery_key`), durably (fsync); it passes
the same key to the platform as its idempotency key; after the post it writes a *done* record with
the platform's message id. On restart, for each entry read again:

- *done*: the message exists; it is not posted again (an edit may follow, for streams);
- *intent* without *done*: the crash came during the post. The runner asks the platform
  (:meth:`~coven_codex.adapters.kit.platform.Platform.find`) whether a message with that key
  exists: Slack answers from message metadata/history, Discord from the message nonce, the web
  page from its own store keyed by the key, the fake platform of the tests from its record. If it
  does, that id is recorded; if not, the message is posted (it was never shown);
- nothing: posted normally.

A platform that cannot answer ``find`` (``capabilities.can_find`` False, the console) is
**at least once**: a crash during the post repeats that one message; nothing is ever lost. The
console chooses this because a lost reply is worse than a repeated line after a crash.

**Storage.** A small JSON-lines file per adapter name next to its journal cursor
(:func:`ledger_path`: ``<journal>.adapters/<name>.ledger.jsonl`` for a file journal; adapters
on another backend give a state folder). Each record is appended in one ``write`` and fsynced.
A torn last line (a crash mid-write) is ignored. Records older than the last
:data:`KEEP_KEYS` keys are dropped when the ledger is opened (the cursor never goes that far back).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from coven_codex.journal.atomic import fsync_directory

log = logging.getLogger(__name__)

KEEP_KEYS = 20_000
"""Keys kept when the ledger is opened; an adapter's cursor is never that many entries behind."""


class LedgerError(Exception):
    """The ledger cannot be read or written; the message says which file and what to do."""


def delivery_key(entry_id: str, part: int | str) -> str:
    """The idempotency key of part ``part`` of entry ``entry_id``: the same on every run, 32 hex digits."""
    return hashlib.sha256(f"{entry_id}\x00{part}".encode()).hexdigest()[:32]


def content_digest(text: str) -> str:
    """A digest of a message's text, kept with its intent: how a platform without an id for the key finds it."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def ledger_path(journal_path: Path, name: str) -> Path:
    """Where the adapter ``name`` on the file journal ``journal_path`` keeps its ledger."""
    return journal_path.with_name(journal_path.name + ".adapters") / f"{quote(name, safe='')}.ledger.jsonl"


@dataclass(frozen=True, slots=True)
class Delivery:
    """What the ledger knows about a key: posted (``message_id``) or only intended (None).

    An intent also says when it was written (``at``, Unix time) and a digest of the text about to
    be posted (:func:`content_digest`), for platforms that find a message by them
    (:class:`~coven_codex.adapters.kit.platform.FindsByContent`).
    """

    message_id: str | None
    at: float | None = None
    digest: str = ""


class DeliveryLedger:
    """Intent and done records per key, in memory and in an append-only file."""

    def __init__(self, path: Path | None, records: dict[str, Delivery], fd: int) -> None:
        self.path = path
        self._records = records
        self._ids = {d.message_id for d in records.values() if d.message_id}
        self._fd = fd
        self._lock = asyncio.Lock()

    @classmethod
    def open(cls, path: Path) -> DeliveryLedger:
        """Load (and compact) the ledger at ``path``, creating it if missing."""
        records: dict[str, Delivery] = {}
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            try:
                raw = path.read_bytes()
            except FileNotFoundError:
                raw = b""
            for line in raw.split(b"\n"):
                record = _decode(line)
                if record is not None:
                    key, found = record
                    earlier = records.pop(key, None) or Delivery(None)
                    message_id = found.message_id or earlier.message_id
                    records[key] = (
                        Delivery(message_id)
                        if message_id
                        else Delivery(None, found.at or earlier.at, found.digest or earlier.digest)
                    )
            if len(records) > KEEP_KEYS or (raw and not raw.endswith(b"\n")):
                records = dict(list(records.items())[-KEEP_KEYS:])
                _rewrite(path, records)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fsync_directory(path.parent)
        except OSError as exc:
            raise LedgerError(
                f"cannot open the delivery ledger {path}: {exc.strerror}; check that its"
                " folder is writable and the disk is not full"
            ) from None
        return cls(path, records, fd)

    @classmethod
    def memory(cls) -> DeliveryLedger:
        """A ledger kept in memory only: for adapters that start afresh each run (the console)."""
        return cls(None, {}, -1)

    @property
    def pending(self) -> int:
        """Deliveries intended and not yet recorded as done."""
        return sum(1 for delivery in self._records.values() if delivery.message_id is None)

    def get(self, key: str) -> Delivery | None:
        """What is known about ``key``: None when it was never intended."""
        return self._records.get(key)

    def taken(self, message_id: str) -> bool:
        """Whether ``message_id`` is already recorded as some key's message."""
        return message_id in self._ids

    async def intend(self, key: str, digest: str = "") -> None:
        """Record, durably, that the message ``key`` (whose text has ``digest``) is about to be posted."""
        if key not in self._records:
            at = round(time.time(), 3)
            self._records[key] = Delivery(None, at, digest)
            await self._write({"key": key, "at": at, "digest": digest} if digest else {"key": key, "at": at})

    async def done(self, key: str, message_id: str) -> None:
        """Record, durably, that the message ``key`` was posted as ``message_id``."""
        known = self._records.get(key)
        if known is None or known.message_id != message_id:
            self._records[key] = Delivery(message_id)
            self._ids.add(message_id)
            await self._write({"key": key, "message": message_id})

    async def keep(self, key: str, value: str) -> None:
        """Record, durably, a mark ``key`` with ``value`` (not a delivery: a followed thread,
        :mod:`~coven_codex.adapters.kit.threads`); written again, it becomes the newest key, which
        compaction keeps."""
        self._records.pop(key, None)
        self._records[key] = Delivery(value)
        await self._write({"key": key, "message": value})

    def close(self) -> None:
        """Close the file."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    async def _write(self, record: dict[str, str | float]) -> None:
        if self._fd < 0:
            return
        line = json.dumps(record, separators=(",", ":")).encode() + b"\n"
        async with self._lock:
            try:
                await asyncio.to_thread(_append, self._fd, line)
            except OSError as exc:
                raise LedgerError(
                    f"cannot write the delivery ledger {self.path}: {exc.strerror}; free disk"
                    " space or fix its permissions, then restart the adapter"
                ) from None


def _append(fd: int, line: bytes) -> None:
    os.write(fd, line)
    os.fsync(fd)


def _decode(line: bytes) -> tuple[str, Delivery] | None:
    if not line.strip():
        return None
    try:
        value = json.loads(line)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("key"), str):
        return None
    message, at, digest = value.get("message"), value.get("at"), value.get("digest")
    return value["key"], Delivery(
        message if isinstance(message, str) else None,
        float(at) if isinstance(at, int | float) else None,
        digest if isinstance(digest, str) else "",
    )


def _rewrite(path: Path, records: dict[str, Delivery]) -> None:
    temporary = path.with_name(path.name + ".tmp")
    lines = [
        json.dumps(
            {"key": key}
            | ({"message": d.message_id} if d.message_id else {})
            | ({"at": d.at} if d.at is not None and not d.message_id else {})
            | ({"digest": d.digest} if d.digest and not d.message_id else {}),
            separators=(",", ":"),
        )
        for key, d in records.items()
    ]
    data = "".join(line + "\n" for line in lines).encode()
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
    fsync_directory(path.parent)
