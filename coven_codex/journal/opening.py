"""Opening a journal by its name: a path is a file journal, ``redis://HOST:PORT/DB?key=NAME`` a Redis one.

Every place that names a journal (``run``, ``chat``, ``web``, the adapters, ``validate``) takes a
:data:`JournalName` (:func:`journal_name` turns a command-line or setting string into one) and
opens it with :func:`open_journal`. Files a program keeps *beside* the journal (pasted images,
an adapter's delivery ledger, the daemon's lock) go next to :func:`local_base`: the file itself,
or for a Redis journal a stand-in path in this machine's state directory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Final, Protocol, runtime_checkable

from pydantic import BeforeValidator

from coven_codex.journal.file import FileJournal
from coven_codex.journal.protocol import Durability, Journal, JournalError, Position
from coven_codex.journal.redis.names import is_redis_name as is_redis_url
from coven_codex.journal.redis.names import parse_redis_name
from coven_codex.journal.segments import Retention

JournalName = Path | str
"""A file journal's path, or a Redis journal's URL (a ``str``, see :func:`journal_name`)."""


def _setting(value: object) -> object:
    return journal_name(value) if isinstance(value, str | Path) else value


JournalNameSetting = Annotated[Path | str, BeforeValidator(_setting)]
"""A journal name as a setting: a Redis URL stays text, anything else becomes a path."""

_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_.-]+")
_SCHEME: Final = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def is_redis_name(name: JournalName) -> bool:
    """Whether ``name`` names a Redis journal (a URL ``redis://``, ``rediss://`` or ``unix://``)."""
    return isinstance(name, str) and is_redis_url(name)


def journal_name(text: str | Path) -> JournalName:
    """A journal name from a flag or a setting: a Redis URL stays text, anything else is a file path."""
    if isinstance(text, str) and is_redis_name(text):
        return text
    return Path(text).expanduser()


def describe_journal(name: JournalName) -> str:
    """The name for messages and logs (a Redis URL without its password)."""
    if is_redis_name(name):
        try:
            return parse_redis_name(str(name)).display()
        except JournalError:
            return "the Redis journal (invalid name)"
    return str(name)


def local_base(name: JournalName, state_root: Path) -> Path:
    """The local path files kept "beside the journal" are named after (``<base>.attachments/``, ...).

    A file journal's own path; for a Redis journal ``<state_root>/redis-journals/HOST_PORT_DB_KEY``.
    """
    if not is_redis_name(name):
        return Path(name)
    location = parse_redis_name(str(name))
    label = _UNSAFE.sub("_", f"{location.url.split('@')[-1].split('://')[-1]}_{location.key}").strip("_.")
    return state_root / "redis-journals" / label[:200]


@dataclass(frozen=True, slots=True)
class JournalOptions:
    """What a journal is opened with, whatever its backend (each backend uses what applies to it)."""

    durability: Durability = "batched"
    follow_replacement: bool = True
    segment_bytes: int | None = None
    segment_age: float | None = None
    retention: Retention = "keep"
    archive: Path | None = None


@runtime_checkable
class CursorListing(Protocol):
    """A journal that can list every saved cursor (``coven-codex journal cursors list``)."""

    async def cursors(self) -> dict[str, Position]:
        """Every saved cursor: name and position."""
        ...


def open_journal(name: JournalName, options: JournalOptions | None = None) -> Journal:
    """The journal ``name`` names: a Redis URL, a ``file://`` URL or a path.

    A Redis name needs redis-py (the ``[redis]`` extra); without it, and for any other URL scheme,
    :class:`JournalError` says what to do.
    """
    options = options or JournalOptions()
    if is_redis_name(name):
        try:
            from coven_codex.journal.redis.journal import RedisJournal  # noqa: PLC0415 (the optional [redis] extra)
        except ImportError:
            raise JournalError(
                "a Redis journal needs redis-py: pip install 'coven-codex[redis]' (or pip install 'redis>=5')"
            ) from None
        return RedisJournal.from_url(str(name))
    if isinstance(name, str) and (match := _SCHEME.match(name)):
        if match.group(1).lower() != "file":
            raise JournalError(
                f"no journal backend for {match.group(1)}://; give a file path, or a Redis URL"
                " redis://HOST:PORT/DB?key=NAME (with the [redis] extra)"
            )
        name = name[len(match.group(0)) :]
    return FileJournal(
        Path(name).expanduser(),
        durability=options.durability,
        follow_replacement=options.follow_replacement,
        segment_bytes=options.segment_bytes,
        segment_age=options.segment_age,
        retention=options.retention,
        archive=options.archive,
    )


async def connected(journal: Journal) -> Journal:
    """``journal``, checked at a process's start: a Redis journal must answer now (one round trip, no
    waiting through an outage), so a Redis that is not running, a wrong or missing password, or
    ``rediss://`` against a plain server fails at once with :class:`JournalError` saying what to fix
    (the journal is then closed). Other journals are returned as they are."""
    connect = getattr(journal, "connect", None)
    if connect is None:
        return journal
    try:
        await connect()
    except JournalError:
        await journal.aclose()
        raise
    return journal
