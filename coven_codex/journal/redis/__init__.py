"""The journal on Redis Streams (docs/journal-protocol.md, "Redis Streams"); needs the ``[redis]`` extra.

A journal named ``redis://HOST:PORT/DB?key=NAME`` lives in the stream ``NAME`` and the keys
``NAME:ids`` (the idempotency index), ``NAME:cursors`` and ``NAME:trimmed``.
"""

from coven_codex.journal.redis.journal import Compaction, Fence, FencedOut, PositionTrimmed, RedisJournal
from coven_codex.journal.redis.names import RedisLocation, is_redis_name, parse_redis_name
from coven_codex.journal.redis.outage import JournalUnavailable

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
