"""The journal on Redis Streams (docs/journal-protocol.md, "Redis Streams"); needs the ``[redis]`` extra.

A journal named ``redis://HOST:PORT/DB?key=NAME`` lives in the stream ``NAME`` and the keys
``NAME:ids`` (the idempotency index), ``NAME:cursors``, ``NAME:trimmed``, ``NAME:epoch`` (which
Redis data this is) and ``NAME:daemon`` (the one daemon's hold). Names are
understood without redis-py (:mod:`.names`); the journal itself is imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from coven_codex.journal.redis.errors import (
    FencedOut,
    JournalLost,
    JournalUnavailable,
    PositionTrimmed,
    RedisMisconfigured,
)
from coven_codex.journal.redis.names import RedisLocation, is_redis_name, parse_redis_name

if TYPE_CHECKING:
    from coven_codex.journal.redis.journal import Compaction, Fence, RedisJournal, open_redis_journal

_LAZY = {"Compaction": "journal", "Fence": "journal", "RedisJournal": "journal", "open_redis_journal": "journal"}


def __getattr__(name: str) -> Any:
    """The journal's classes, imported (with redis-py) when first asked for."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = [
    "Compaction",
    "Fence",
    "FencedOut",
    "JournalLost",
    "JournalUnavailable",
    "PositionTrimmed",
    "RedisJournal",
    "RedisLocation",
    "RedisMisconfigured",
    "is_redis_name",
    "open_redis_journal",
    "parse_redis_name",
]
