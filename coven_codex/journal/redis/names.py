"""Journal names on Redis: ``redis://HOST:PORT/DB?key=NAME`` (docs/journal-protocol.md, Redis Streams)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from coven_codex.journal.protocol import JournalError

SCHEMES: Final = ("redis", "rediss", "unix")
DEFAULT_KEY: Final = "coven-codex"
MAX_KEY: Final = 200
_KEY = re.compile(r"[A-Za-z0-9_.:{}/@+=-]+")


def is_redis_name(name: str) -> bool:
    """Whether a journal name names a Redis journal (``redis://``, ``rediss://``, ``unix://``), not a file."""
    return urlsplit(name).scheme in SCHEMES and "://" in name


@dataclass(frozen=True, slots=True)
class RedisLocation:
    """Where a Redis journal lives: the server (``url``, for redis-py) and the stream's key."""

    url: str
    """The server's URL without ``key`` (credentials included when the name had them)."""
    key: str
    """The stream's key; the journal's other keys start with it (``KEY:ids``, ``KEY:cursors``, ``KEY:trimmed``,
    ``KEY:journal-id``)."""

    @property
    def stream(self) -> str:
        """The stream holding the entries."""
        return self.key

    @property
    def ids(self) -> str:
        """The hash entry id → ``"<previous stream id> <stream id>"`` that makes appends idempotent."""
        return f"{self.key}:ids"

    @property
    def cursors(self) -> str:
        """The hash cursor name → position."""
        return f"{self.key}:cursors"

    @property
    def identity(self) -> str:
        """The journal's identity (:mod:`coven_codex.journal.identity`), set once with ``SET NX``."""
        return f"{self.key}:journal-id"

    @property
    def trimmed(self) -> str:
        """The stream id of the last entry removed by compaction (absent: none removed)."""
        return f"{self.key}:trimmed"

    @property
    def epoch(self) -> str:
        """A random value written by the first process that connects: gone or different after a Redis
        restart that lost the data (no persistence, a flush), which every process checks on each new
        connection (:class:`~coven_codex.journal.redis.errors.JournalLost`)."""
        return f"{self.key}:epoch"

    @property
    def daemon(self) -> str:
        """The hold of the one daemon serving the journal without ``cluster`` (who, with a time to live)."""
        return f"{self.key}:daemon"

    def webhook(self, target: str) -> str:
        """The hold of the one webhook sender of ``target``."""
        return f"{self.key}:webhook:{target}"

    def display(self) -> str:
        """The name without password, for messages and logs."""
        parts = urlsplit(self.url)
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        if parts.username:
            netloc = f"{parts.username}@{netloc}"
        query = urlencode([("key", self.key)])
        return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def parse_redis_name(name: str) -> RedisLocation:
    """The location a Redis journal name gives; :class:`JournalError` saying what is wrong."""
    parts = urlsplit(name)
    if parts.scheme not in SCHEMES:
        raise JournalError(f"{name[:200]!r} is not a Redis journal name: write redis://HOST:PORT/DB?key=NAME")
    query = parse_qsl(parts.query, keep_blank_values=True)
    keys = [value for field, value in query if field == "key"]
    others = sorted({field for field, _ in query if field != "key"})
    if others:
        raise JournalError(
            f"unknown option(s) {', '.join(others)[:200]} in the Redis journal name: only ?key=NAME is understood"
        )
    if len(keys) > 1:
        raise JournalError("the Redis journal name has key= more than once: give one ?key=NAME")
    key = keys[0] if keys else DEFAULT_KEY
    if not 1 <= len(key) <= MAX_KEY or not _KEY.fullmatch(key):
        raise JournalError(
            f"invalid Redis journal key {key[:MAX_KEY]!r}: use 1 to {MAX_KEY} letters, digits and _.:{{}}/@+=-"
        )
    if parts.scheme != "unix":
        try:
            _ = parts.port
        except ValueError:
            raise JournalError(f"invalid port in the Redis journal name {name[:200]!r}") from None
        if not parts.hostname:
            raise JournalError(
                f"the Redis journal name {name[:200]!r} has no host: write redis://HOST:PORT/DB?key=NAME"
            )
        db = parts.path.strip("/")
        if db and not db.isdigit():
            raise JournalError(f"invalid Redis database {db[:20]!r} in the journal name: a number, e.g. /0")
    url = urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
    return RedisLocation(url=url, key=key)
