"""What a tailer reports besides lines: truncation, replacement, polling fallback."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

log = logging.getLogger(__name__)


class TailNoticeKind(StrEnum):
    """What happened to a tailed file that its reader should know."""

    POLLING = "polling"
    """No usable change notification for this file: the tailer polls it."""
    TRUNCATED = "truncated"
    """The file became shorter than what was already read: reading restarts from 0."""
    REPLACED = "replaced"
    """Another file now has the path (rename-over, rotation): the old one was read to its end."""
    DROPPED_PARTIAL = "dropped_partial"
    """An unterminated last line was abandoned (its file was truncated or replaced)."""


@dataclass(frozen=True, slots=True)
class TailNotice:
    """A notice from a tailer about its file, with a message for people."""

    kind: TailNoticeKind
    path: Path
    message: str
    offset: int | None = None
    """Where reading continues (truncation, replacement) or where the dropped bytes began."""


NoticeCallback = Callable[[TailNotice], None]

_LEVELS = {
    TailNoticeKind.POLLING: logging.WARNING,
    TailNoticeKind.TRUNCATED: logging.WARNING,
    TailNoticeKind.REPLACED: logging.INFO,
    TailNoticeKind.DROPPED_PARTIAL: logging.WARNING,
}


def report(notice: TailNotice, callback: NoticeCallback | None) -> None:
    """Log ``notice`` and hand it to ``callback``."""
    log.log(_LEVELS[notice.kind], "%s: %s", notice.path, notice.message)
    if callback is not None:
        callback(notice)
