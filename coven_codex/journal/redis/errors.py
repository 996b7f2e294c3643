"""The Redis journal's own errors (importable without redis-py)."""

from __future__ import annotations

from coven_codex.journal.protocol import JournalError, Position, StorageError


class FencedOut(JournalError):
    """A fenced append was refused: the fence's key no longer holds the writer's token.

    Another writer took over (its lease has a newer fencing token); nothing was appended.
    """

    def __init__(self, message: str, *, key: str, token: int, held: str | None) -> None:
        super().__init__(message)
        self.key = key
        self.token = token
        self.held = held


class PositionTrimmed(JournalError):
    """A reader's position lies before entries compaction removed: reading on would skip them."""

    def __init__(self, message: str, *, position: Position, trimmed: Position) -> None:
        super().__init__(message)
        self.position = position
        self.trimmed = trimmed


class JournalUnavailable(StorageError):
    """Redis could not be reached for longer than the journal's outage limit."""


class JournalLost(StorageError):
    """Redis came back without the journal (restarted without persistence, or flushed): its epoch key
    is gone or differs from the one found at start, so every entry and cursor read before is gone."""


class RedisMisconfigured(StorageError):
    """Redis refused the connection for a reason waiting does not fix: a wrong or missing password,
    ``rediss://`` (TLS) against a server that speaks plain Redis. The message says what to fix."""


class HoldLost(StorageError):
    """Another process took over what this one held alone (a Redis journal's one daemon): this one stalled
    past its hold's time to live (:mod:`~coven_codex.journal.redis.holds`). The message names the new holder."""
