"""The journal on a Redis stream (docs/journal-protocol.md, "Redis Streams")."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar
from urllib.parse import urlsplit

from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection
from redis.backoff import NoBackoff
from redis.exceptions import AuthenticationError
from redis.retry import Retry

from coven_codex.entries import BaseEntry
from coven_codex.journal.decoding import decode_line
from coven_codex.journal.file import encode_entry, with_id
from coven_codex.journal.interest import Interest
from coven_codex.journal.protocol import (
    START,
    BadLine,
    CursorError,
    JournalError,
    JournalItem,
    JournalRecord,
    Position,
    check_cursor_name,
    check_position,
)
from coven_codex.journal.redis import scripts
from coven_codex.journal.redis.batcher import AppendBatcher
from coven_codex.journal.redis.errors import FencedOut, JournalLost, PositionTrimmed, RedisMisconfigured
from coven_codex.journal.redis.names import RedisLocation, parse_redis_name
from coven_codex.journal.redis.outage import DEFAULT_OUTAGE_LIMIT, TRANSIENT, Reachability, refused_credentials
from coven_codex.journal.redis.positions import position_of, stream_id
from coven_codex.tailing import DEFAULT_MAX_LINE_BYTES

log = logging.getLogger("coven_codex.journal.redis")

T = TypeVar("T")

BATCH: Final = 1000
"""Entries fetched per round trip when reading."""
BLOCK_SECONDS: Final = 5.0
"""A tail waits this long in one ``XREAD BLOCK`` before it asks again (bounded, not polling)."""
SOCKET_TIMEOUT: Final = 30.0
"""Longest wait for one reply; beyond it the connection counts as lost."""
CONNECT_TIMEOUT: Final = 5.0
"""Longest wait for a connection (and a TLS handshake)."""
PLAIN_PROBE_TIMEOUT: Final = 2.0
"""How long :func:`speaks_plain_redis` waits for a reply."""

ConnectHook = Callable[[AbstractConnection], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Fence:
    """An append condition: Redis key ``key`` must hold ``token`` (a lease's fencing token)."""

    key: str
    token: int


@dataclass(frozen=True, slots=True)
class _Append:
    """One append waiting for its batch: the entry's id, its line (without newline) and its fence."""

    entry_id: str
    payload: bytes
    fence: Fence | None


@dataclass(frozen=True, slots=True)
class Compaction:
    """What :meth:`RedisJournal.compact` removed."""

    removed: int
    """Entries removed."""
    through: Position | None
    """The last entry removed (None: nothing was)."""
    reason: str
    """Why it stopped there, in words."""


def _client(url: str, *, socket_timeout: float, on_connect: ConnectHook | None = None) -> Redis:
    """A redis-py client that does not retry by itself: :class:`Reachability` does, once for everything.

    ``on_connect`` runs on each new connection (after redis-py's own handshake), before any command.
    """
    return Redis.from_url(
        url,
        socket_timeout=socket_timeout,
        socket_connect_timeout=CONNECT_TIMEOUT,
        retry=Retry(NoBackoff(), 0),
        health_check_interval=0,
        redis_connect_func=on_connect,
    )


async def speaks_plain_redis(host: str, port: int) -> bool:
    """Whether the server at ``host:port`` answers a plain-text ``PING`` (it does not speak TLS)."""
    try:
        async with asyncio.timeout(PLAIN_PROBE_TIMEOUT):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                writer.write(b"PING\r\n")
                await writer.drain()
                reply = await reader.read(64)
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
    except (OSError, TimeoutError):
        return False
    return reply.startswith((b"+PONG", b"-NOAUTH", b"-ERR", b"-WRONGPASS"))


def _stream_entries(streams: Any) -> list[Any]:
    """The entries of the one stream an ``XREAD`` reply holds.

    RESP2 gives ``[[name, entries]]``, RESP3 ``{name: [entries]}``.
    """
    if not streams:
        return []
    if isinstance(streams, dict):
        (value,) = streams.values()
        return list(value[0]) if value else []
    return list(streams[0][1])


def _payload(fields: Any) -> tuple[bytes | None, str]:
    """The ``entry`` field of a stream entry, or None and why it is not an entry."""
    if isinstance(fields, dict):
        if b"entry" in fields and isinstance(fields[b"entry"], bytes):
            return fields[b"entry"], ""
        names = ", ".join(repr(name)[:40] for name in list(fields)[:5])
        return None, f"stream entry has no 'entry' field (it has {names}); it was not written by coven-codex"
    if isinstance(fields, list):
        pairs = dict(zip(fields[::2], fields[1::2], strict=False))
        return _payload(pairs)
    return None, "stream entry has no fields"


class RedisJournal:
    """A journal on one Redis stream; several processes on any machine may append and read at once.

    Positions are stream ids (``Position(milliseconds, sequence)``): a record lies between the
    id of the entry before it (``start``) and its own id (``end``); :data:`START` (``0-0``) lies
    before the first. Appends run one Lua script (:mod:`.scripts`) that is idempotent by entry
    id, and may carry a :class:`Fence`; concurrent appends share one script call (:mod:`.batcher`).
    Cursors are a hash in Redis. Each :meth:`tail` has a connection of its own and waits in
    ``XREAD BLOCK``. While Redis is unreachable every operation waits for it (:mod:`.outage`), for
    at most ``outage_limit`` seconds.
    """

    def __init__(
        self,
        location: RedisLocation,
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        outage_limit: float = DEFAULT_OUTAGE_LIMIT,
        block_seconds: float = BLOCK_SECONDS,
    ) -> None:
        if max_line_bytes < 1:
            raise JournalError(f"max_line_bytes must be at least 1, got {max_line_bytes}")
        self.location = location
        self.max_line_bytes = max_line_bytes
        self.block_seconds = block_seconds
        self._epoch: bytes | None = None
        """The value of ``NAME:epoch`` when this journal first connected (None: not connected yet)."""
        self._client = _client(location.url, socket_timeout=SOCKET_TIMEOUT, on_connect=self._on_connect)
        self.reachability = Reachability(
            location.display(), outage_limit, drop_idle=self._drop_idle, diagnose=self._diagnose
        )
        self.reachability.password_given = urlsplit(location.url).password is not None
        self._append = self._client.register_script(scripts.APPEND)
        self._appends: AppendBatcher[_Append, bytes] = AppendBatcher(self._send_appends, closed=self._closed_error)
        self._read = self._client.register_script(scripts.READ)
        self._end = self._client.register_script(scripts.END)
        self._trim = self._client.register_script(scripts.TRIM)
        self._closed = False

    @classmethod
    def from_url(cls, name: str, **options: Any) -> RedisJournal:
        """The journal a name ``redis://HOST:PORT/DB?key=NAME`` gives (see :func:`.names.parse_redis_name`)."""
        return cls(parse_redis_name(name), **options)

    def __repr__(self) -> str:
        return f"RedisJournal({self.location.display()!r})"

    @property
    def client(self) -> Redis:
        """The journal's Redis client, for what lives beside the stream (the cluster's keys,
        ``coven_codex/cluster/``): its calls go through :attr:`reachability` like the journal's, so
        one outage is waited for and said once for all of them."""
        return self._client

    def _closed_error(self) -> JournalError:
        return JournalError(f"the journal {self.location.display()} is closed")

    async def _call(self, operation: Callable[[], Awaitable[T]]) -> T:
        if self._closed:
            raise self._closed_error()
        return await self.reachability.call(operation)

    async def _drop_idle(self) -> None:
        await self._client.connection_pool.disconnect(inuse_connections=False)

    # -- which Redis data this is ----------------------------------------------------------

    async def _on_connect(self, connection: AbstractConnection) -> None:
        """Each new connection, before its first command: the journal's epoch must be the one found first.

        The first connection of this journal writes ``NAME:epoch`` when it is missing (``SET NX
        GET``: the epoch another process wrote wins) and keeps it; every later one (a reconnect
        after a Redis restart, a tail's connection) reads it back. Gone or different, Redis came
        back without the journal: :class:`JournalLost`, never a silent carry-on over an empty stream.
        """
        await connection.on_connect()
        try:
            if self._epoch is None:
                made = f"{secrets.token_hex(8)} {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}".encode()
                await connection.send_command("SET", self.location.epoch, made, "NX", "GET")
                found = await connection.read_response()
                if self._epoch is None:
                    self._epoch = made if found is None else bytes(found)
                return
            await connection.send_command("GET", self.location.epoch)
            found = await connection.read_response()
            if found != self._epoch:
                raise self._lost(found)
        except BaseException:
            await connection.disconnect()
            raise

    def _lost(self, found: object) -> JournalLost:
        what = "is gone" if found is None else "changed"
        lost = JournalLost(
            f"the journal's Redis at {self.location.display()} came back without the journal: its epoch key"
            f" {self.location.epoch!r} {what}, so Redis was restarted without persistence (or flushed) and every"
            " entry and cursor in it is lost. Stopped rather than carry on over an empty journal. Turn Redis"
            " persistence on (appendonly yes, docs/journal-protocol.md), then start again: the daemon then"
            " starts on the new, empty journal"
        )
        self.reachability.lost = lost
        return lost

    async def _plain_behind_tls(self, why: str) -> RedisMisconfigured | None:
        """A ``rediss://`` name whose server speaks plain Redis is a misconfiguration (``why``: how it showed)."""
        parts = urlsplit(self.location.url)
        if parts.scheme != "rediss" or parts.hostname is None:
            return None
        if not await speaks_plain_redis(parts.hostname, parts.port or 6379):
            return None
        plain = self.location.display().replace("rediss://", "redis://", 1)
        return RedisMisconfigured(
            f"the journal's Redis at {self.location.display()} speaks plain Redis, not TLS ({why}): the"
            f" name says rediss://. Write {plain} (with the password, if any), or turn TLS on in Redis"
            " (tls-port), then start again"
        )

    async def _diagnose(self, exc: BaseException) -> RedisMisconfigured | None:
        """An outage beginning on a ``rediss://`` name whose server speaks plain Redis is a misconfiguration."""
        return await self._plain_behind_tls(_short(exc))

    async def connect(self) -> None:
        """One round trip to Redis at start, without waiting through an outage: a process that starts
        on a Redis it cannot use stops at once, saying what to fix (:class:`JournalError`). A ``rediss://``
        name is first asked in plain text (:func:`speaks_plain_redis`, one local round trip): a plain
        server never answers a TLS handshake, which would be waited for the whole ``CONNECT_TIMEOUT``."""
        wrong = await self._plain_behind_tls("it answered a plain-text PING")
        if wrong is not None:
            raise wrong
        try:
            await self._client.ping()
        except AuthenticationError as exc:
            raise refused_credentials(
                self.location.display(), exc, password_given=self.reachability.password_given
            ) from None
        except JournalLost:
            raise
        except TRANSIENT as exc:
            wrong = await self._diagnose(exc)
            if wrong is not None:
                raise wrong from None
            raise JournalError(
                f"cannot reach the journal's Redis at {self.location.display()} ({_short(exc)}); start Redis,"
                " or fix --journal (redis://HOST:PORT/DB?key=NAME)"
            ) from None

    # -- appending -------------------------------------------------------------------------

    async def append(self, entry: BaseEntry, *, fence: Fence | None = None) -> JournalRecord:
        """Append ``entry`` once per id (an ``id`` is assigned when it has none).

        An entry whose id is already in the journal is not appended again: its first record
        is returned (so a retried append, e.g. after a lost reply, never duplicates). With a
        ``fence``, the append happens only while ``fence.key`` holds ``fence.token``, else
        :class:`FencedOut`. Appends made while others are on their way travel together in the
        next batch (:mod:`.batcher`), each checked on its own.
        """
        entry = with_id(entry)
        assert entry.id is not None
        payload = encode_entry(entry, self.max_line_bytes)[:-1]
        reply = await self._appends.submit(_Append(entry.id, payload, fence), len(payload))
        status, held_given, rest = bytes(reply).partition(b" ")
        if status == b"fenced":
            assert fence is not None
            held = rest.decode(errors="replace")[:40] if held_given else None
            raise FencedOut(
                f"append of entry {entry.id[:80]} refused: {fence.key[:200]} holds {held!r}, not this writer's"
                f" token {fence.token} (another writer took over); nothing was written",
                key=fence.key,
                token=fence.token,
                held=held,
            )
        if status == b"error":
            assert fence is not None
            why = rest.decode(errors="replace")[:200]
            raise JournalError(
                f"append of entry {entry.id[:80]} refused: Redis cannot read its fence key {fence.key[:200]} ({why});"
                " that key must hold a lease's fencing token (a string), is something else writing it? Nothing"
                " was written"
            )
        previous, _, rest = rest.partition(b" ")
        own, _, known = rest.partition(b" ")
        start, end = position_of(previous), position_of(own)
        if status == b"known" and known:
            item = decode_line(known, start, end, max_line_bytes=self.max_line_bytes)
            if isinstance(item, JournalRecord):
                return item
        return JournalRecord(entry, start, end)

    async def _send_appends(self, batch: Sequence[_Append]) -> list[bytes]:
        """One script call for a batch of appends (:data:`.scripts.APPEND`): one reply per append."""
        loc = self.location
        keys = [loc.stream, loc.ids, loc.trimmed]
        index = {key: number for number, key in enumerate(keys, start=1)}
        parts: list[bytes] = []
        for append in batch:
            entry_id = append.entry_id.encode()
            if append.fence is None:
                parts.append(b"%d %d 0 \n" % (len(entry_id), len(append.payload)))
            else:
                number = index.get(append.fence.key)
                if number is None:
                    keys.append(append.fence.key)
                    number = index[append.fence.key] = len(keys)
                parts.append(b"%d %d %d %d\n" % (len(entry_id), len(append.payload), number, append.fence.token))
            parts += (entry_id, append.payload)
        args = [b"".join(parts)]

        async def run() -> Any:
            return await self._append(keys=keys, args=args)

        replies: list[bytes] = await self._call(run)
        return replies

    async def append_raw(self, fields: dict[str, bytes]) -> Position:
        """Add a stream entry with exactly these fields (``XADD``), as another program could; its position.

        For tests and tools: nothing is checked, and the idempotency index is not updated.
        """

        async def run() -> Any:
            return await self._client.xadd(self.location.stream, fields)  # type: ignore[arg-type]  # bytes values are fine

        return position_of(await self._call(run))

    # -- reading ---------------------------------------------------------------------------

    def _items(self, after: Position, entries: Sequence[Any], interest: Interest | None = None) -> list[JournalItem]:
        items: list[JournalItem] = []
        start = after
        for raw_id, fields in entries:
            end = position_of(raw_id)
            payload, reason = _payload(fields)
            if payload is None:
                items.append(BadLine(start, end, reason))
            elif interest is not None and not interest.admits(payload):
                pass  # passed over undecoded
            else:
                items.append(decode_line(payload, start, end, max_line_bytes=self.max_line_bytes))
            start = end
        return items

    def _trimmed(self, after: Position, trimmed: Position) -> PositionTrimmed:
        return PositionTrimmed(
            f"the journal {self.location.display()} no longer has the entries after position {after}: they were"
            f" removed by compaction (everything up to {trimmed}). This reader missed them; start it again from"
            f" the journal's start ({START}, now the oldest entry kept) or its end, knowing those entries are"
            " gone, and keep a saved cursor for every reader so that compaction waits for it",
            position=after,
            trimmed=trimmed,
        )

    async def _batch(
        self, client: Redis, after: Position, last: Position | None, interest: Interest | None = None
    ) -> tuple[Position, list[JournalItem], Position | None]:
        """Up to :data:`BATCH` stream entries after ``after`` (up to ``last`` inclusive): the position
        they follow, their items (those ``interest`` admits) and, when the batch was full, the last
        entry's position (where the next batch follows)."""
        keys = [self.location.stream, self.location.trimmed]
        args: list[str | int] = [stream_id(after), "+" if last is None else stream_id(last), BATCH]

        async def run() -> Any:
            return await self._read(keys=keys, args=args, client=client)

        reply = await self._call(run)
        if reply[0] == b"trimmed":
            raise self._trimmed(after, position_of(reply[1]))
        begin = position_of(reply[1])
        entries = reply[2]
        full = position_of(entries[-1][0]) if len(entries) >= BATCH else None
        return begin, self._items(begin, entries, interest), full

    async def tail(self, start: Position = START) -> AsyncGenerator[JournalItem, None]:
        """Every item from ``start`` on, live, on a connection of its own; never ends by itself.

        One round trip per wake-up: ``XREAD BLOCK`` and, pipelined behind it, ``GET`` of the trim
        point. A trim point at or before the position read from proves nothing after it was removed
        before the ``XREAD`` ran (it only grows); one past it raises :class:`PositionTrimmed`.
        """
        after = check_position(start)
        client = _client(
            self.location.url, socket_timeout=self.block_seconds + SOCKET_TIMEOUT, on_connect=self._on_connect
        )
        block_ms = max(1, int(self.block_seconds * 1000))
        try:
            while True:
                since = stream_id(after)

                async def wake(since: str = since) -> list[Any]:
                    pipe = client.pipeline(transaction=False)
                    pipe.xread({self.location.stream: since}, count=BATCH, block=block_ms)
                    pipe.get(self.location.trimmed)
                    return await pipe.execute()

                streams, raw_trimmed = await self._call(wake)
                trimmed = START if raw_trimmed is None else position_of(raw_trimmed)
                if after == START:
                    after = trimmed
                elif after < trimmed:
                    raise self._trimmed(after, trimmed)
                for item in self._items(after, _stream_entries(streams)):
                    yield item
                    after = item.end
        finally:
            with contextlib.suppress(Exception):
                await client.aclose()

    async def read(
        self, start: Position = START, end: Position | None = None, *, interest: Interest | None = None
    ) -> list[JournalItem]:
        """The items lying between ``start`` and ``end`` (the current end when None); with
        ``interest``, only the entries it admits are decoded and returned."""
        check_position(start)
        if end is not None and check_position(end) < start:
            raise JournalError(f"invalid range {start}..{end}")
        items: list[JournalItem] = []
        after = start
        while True:
            _begin, batch, full = await self._batch(self._client, after, end, interest)
            items.extend(batch)
            if full is None:
                return items
            after = full

    async def end_position(self) -> Position:
        """The id of the last entry (:data:`START` for an empty journal)."""
        keys = [self.location.stream, self.location.trimmed]

        async def run() -> Any:
            return await self._end(keys=keys, args=[])

        return position_of(await self._call(run))

    # -- cursors ---------------------------------------------------------------------------

    async def load_cursor(self, name: str) -> Position | None:
        """The position saved under ``name`` (in the hash ``KEY:cursors``), or None."""
        check_cursor_name(name)

        async def run() -> Any:
            return await self._client.hget(self.location.cursors, name)

        raw = await self._call(run)
        if raw is None:
            return None
        try:
            return position_of(raw)
        except JournalError:
            raise CursorError(
                f"cursor {name!r} in {self.location.cursors} is corrupt ({raw[:40]!r}, expected a stream id"
                f" MS-SEQ); fix it, or delete it (HDEL {self.location.cursors} <name>) to make this reader start"
                " from the beginning"
            ) from None

    async def save_cursor(self, name: str, position: Position) -> None:
        """Save ``position`` under ``name`` (one ``HSET``: atomic; durable as Redis' persistence is)."""
        check_cursor_name(name)
        value = stream_id(check_position(position))

        async def run() -> Any:
            return await self._client.hset(self.location.cursors, name, value)

        await self._call(run)

    async def load_identity(self) -> str | None:
        """The identity recorded for this journal (in ``KEY:journal-id``), or None."""

        async def run() -> Any:
            return await self._client.get(self.location.identity)

        raw = await self._call(run)
        return None if raw is None else bytes(raw).decode("utf-8", "replace").strip()

    async def make_identity(self, made: str) -> str:
        """Record ``made`` as the identity unless one is recorded already (``SET NX``); the one that holds."""

        async def run() -> Any:
            await self._client.set(self.location.identity, made, nx=True)
            return await self._client.get(self.location.identity)

        raw = await self._call(run)
        return made if raw is None else bytes(raw).decode("utf-8", "replace").strip()

    def identity_location(self) -> str:
        """Where the identity is kept, for messages."""
        return f"{self.location.identity} on {self.location.display()}"

    async def cursors(self) -> dict[str, Position]:
        """Every saved cursor (corrupt ones left out, with a warning)."""

        async def run() -> Any:
            return await self._client.hgetall(self.location.cursors)

        found: dict[str, Position] = {}
        for raw_name, raw in (await self._call(run)).items():
            name = raw_name.decode(errors="replace")
            try:
                found[name] = position_of(raw)
            except JournalError:
                log.warning("cursor %r of %s is corrupt; ignored", name[:80], self.location.display())
        return found

    # -- retention -------------------------------------------------------------------------

    async def compact(self, *, through: Position | None = None) -> Compaction:
        """Remove the entries every saved cursor has passed (``XTRIM MINID``), and their idempotency index.

        ``through`` bounds it further (nothing after that position is removed). Nothing is
        removed while no cursor is saved (who reads is then unknown). A reader whose position
        lies before what was removed gets :class:`PositionTrimmed` instead of a silent gap. An
        append retried after its entry was removed is appended again.
        """
        cursors = await self.cursors()
        if not cursors:
            return Compaction(0, None, "no cursor is saved, so nothing is known to be read")
        name, oldest = min(cursors.items(), key=lambda pair: pair[1])
        if through is not None and through < oldest:
            name, oldest = "(through)", through
        keys = [self.location.stream, self.location.ids, self.location.trimmed]
        removed = 0
        last_removed: Position | None = None
        while True:
            args = [stream_id(oldest), BATCH]

            async def run(args: list[Any] = args) -> Any:
                return await self._trim(keys=keys, args=args)

            count, last = await self._call(run)
            if not count:
                break
            removed += int(count)
            last_removed = position_of(last)
        return Compaction(removed, last_removed, f"kept everything after {name!r} at {oldest}, the oldest bound")

    # -- lifecycle -------------------------------------------------------------------------

    async def ping(self) -> None:
        """One round trip to Redis, without waiting through an outage (raises redis-py's errors)."""
        await self._client.ping()

    async def aclose(self) -> None:
        """Close the journal's connections; later operations fail (tails close their own)."""
        self._closed = True
        await self._appends.aclose()
        await self._client.aclose()


def open_redis_journal(name: str, options: object = None) -> RedisJournal:
    """Open the Redis journal ``name`` names, for a registry of journal backends by URL scheme.

    ``options`` (a file journal's durability, segments, ...) do not apply to Redis and are ignored.
    """
    return RedisJournal.from_url(name)


def _short(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."
