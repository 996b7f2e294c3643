"""The journal on Redis Streams (docs/journal-protocol.md, "Redis Streams"); needs the ``[redis]`` extra.

A journal named ``redis://HOST:PORT/DB?key=NAME`` lives in the stream ``NAME`` and the keys
``NAME:ids`` (the idempotency index), ``NAME:cursors`` and ``NAME:trimmed``. Names are
understood without redis-py (:mod:`.names`); the journal itself is imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from coven_codex.journal.redis.errors import FencedOut, JournalUnavailable, PositionTrimmed
from coven_codex.journal.redis.names import RedisLocation, is_redis_name, parse_redis_name

if TYPE_CHECKING:
    from coven_codex.journal.redis.journal import Compaction, Fence, RedisJournal

_LAZY = {"Compaction": "journal", "Fence": "journal", "RedisJournal": "journal"}


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
    "JournalUnavailable",
    "PositionTrimmed",
    "RedisJournal",
    "RedisLocation",
    "is_redis_name",
    "parse_redis_name",
]
