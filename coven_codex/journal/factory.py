"""Opening a journal by its name: a path is the file backend, ``scheme://...`` a registered backend.

Every place that names a journal (the ``coven-codex journal`` command today) calls
:func:`open_journal`; a backend reached by a URL registers itself once with
:func:`register_backend` (``register_backend("redis", open_redis_journal)``), and then every one of
those places accepts its URLs. Backends may also implement :class:`ManagedJournal` (listing
cursors, compaction) for ``coven-codex journal cursors`` and ``compact``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, Protocol, runtime_checkable

from coven_codex.journal.file import FileJournal
from coven_codex.journal.protocol import Durability, Journal, JournalError, Position
from coven_codex.journal.segments import CompactReport, Retention

_SCHEME: Final = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


@dataclass(frozen=True, slots=True)
class JournalOptions:
    """What a journal is opened with, whatever its backend (each backend uses what applies to it)."""

    durability: Durability = "batched"
    follow_replacement: bool = True
    segment_bytes: int | None = None
    segment_age: float | None = None
    retention: Retention = "keep"
    archive: Path | None = None


Opener = Callable[[str, JournalOptions], Journal]
"""Opens the journal a URL names (the whole URL is given), or raises :class:`JournalError` saying why not."""

_BACKENDS: dict[str, Opener] = {}


@runtime_checkable
class ManagedJournal(Protocol):
    """What ``coven-codex journal cursors`` and ``compact`` need beyond the :class:`Journal` protocol."""

    async def cursors(self) -> dict[str, Position]:
        """Every saved cursor: name and position."""
        ...

    async def compact(
        self, *, action: Literal["archive", "delete"] = "archive", archive: Path | None = None, dry_run: bool = False
    ) -> CompactReport:
        """Remove (archive or delete) what lies behind every saved cursor."""
        ...


def register_backend(scheme: str, opener: Opener) -> None:
    """Make :func:`open_journal` open ``scheme://...`` names with ``opener`` (the last registration wins)."""
    _BACKENDS[scheme.lower()] = opener


def is_url(name: str | Path) -> bool:
    """Whether ``name`` is a URL (``scheme://...``) rather than a file path."""
    return isinstance(name, str) and _SCHEME.match(name) is not None


def open_journal(name: str | Path, options: JournalOptions | None = None) -> Journal:
    """The journal ``name`` names: a registered backend for ``scheme://...``, else the file at that path."""
    options = options or JournalOptions()
    if isinstance(name, str) and (match := _SCHEME.match(name)):
        scheme = match.group(1).lower()
        if scheme == "file":
            name = name[len("file://") :]
        else:
            opener = _BACKENDS.get(scheme)
            if opener is None:
                known = ", ".join(sorted(f"{s}://" for s in _BACKENDS)) or "none is installed"
                raise JournalError(
                    f"no journal backend for {scheme}:// (known URL schemes: {known}); give a file path,"
                    " or install the extra that provides it (for redis://: pip install 'coven-codex[redis]')"
                )
            return opener(name, options)
    return FileJournal(
        Path(name).expanduser(),
        durability=options.durability,
        follow_replacement=options.follow_replacement,
        segment_bytes=options.segment_bytes,
        segment_age=options.segment_age,
        retention=options.retention,
        archive=options.archive,
    )
