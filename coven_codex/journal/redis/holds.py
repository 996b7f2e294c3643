"""Holds: one process at a time holds a name in Redis (the one daemon of a journal, the one webhook
sender of a target), with a time to live so that a holder killed with ``kill -9`` is replaced.

A hold is a Redis string whose value names its holder (:class:`Holder`: an owner id, the host, the
pid, since when) and which expires ``ttl`` after its last renewal (Redis's clock). Taking it, renewing
it and giving it back are Lua scripts, atomic in Redis. The owner id decides: a process whose owner
id is the one in the hold takes it back at once (a daemon restarted on the same state directory after
a ``kill -9``; the directory's lock makes two live daemons with one id impossible). A hold may also
refuse while some other set of live processes exists (``conflicts``: sorted sets scored by when each
member's heartbeat runs out, e.g. a cluster's live daemons).

:meth:`RedisHold.keep` renews it every third of ``ttl`` until cancelled; a renewal that finds another
holder (this process stalled past ``ttl`` and someone took over) raises :class:`HoldLost`. A renewal
that finds the hold gone (Redis was unreachable for longer than ``ttl``) takes it again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from coven_codex.journal.redis.errors import HoldLost

if TYPE_CHECKING:
    from coven_codex.journal.redis.journal import RedisJournal

log = logging.getLogger(__name__)

RENEWALS_PER_TTL: Final = 3
"""Renewals per time to live: a hold survives two lost renewals."""

_NOW_MS: Final = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function owner(raw)
  local ok, value = pcall(cjson.decode, raw)
  if ok and type(value) == 'table' and type(value['owner']) == 'string' then return value['owner'] end
  return ''
end
"""

TAKE: Final = (
    _NOW_MS
    + """
-- KEYS: hold, conflicting live sets...; ARGV: owner id, holder record, ttl ms
for i = 2, #KEYS do
  local live = redis.call('ZRANGEBYSCORE', KEYS[i], '(' .. now, '+inf', 'LIMIT', 0, 1)
  if #live > 0 then return {'conflict', KEYS[i], live[1], redis.call('ZCOUNT', KEYS[i], '(' .. now, '+inf')} end
end
local held = redis.call('GET', KEYS[1])
if held and owner(held) ~= ARGV[1] then return {'held', held} end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return {'ok'}
"""
)
"""Take the hold unless another owner holds it or a conflicting set has a live member."""

RENEW: Final = (
    _NOW_MS
    + """
-- KEYS: hold; ARGV: owner id, holder record, ttl ms
local held = redis.call('GET', KEYS[1])
if held and owner(held) ~= ARGV[1] then return {'held', held} end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return {'ok'}
"""
)
"""Extend our hold (take it again when it ran out and nobody took it); another holder: ``held``."""

RELEASE: Final = (
    _NOW_MS
    + """
-- KEYS: hold; ARGV: owner id
local held = redis.call('GET', KEYS[1])
if held and owner(held) == ARGV[1] then redis.call('DEL', KEYS[1]) return 1 end
return 0
"""
)
"""Give the hold back if it is still ours."""


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds a hold, as its value says."""

    owner: str
    host: str
    pid: int
    since: str
    """When it took the hold (UTC, ISO 8601)."""

    @classmethod
    def here(cls, owner: str) -> Holder:
        """This process, holding from now on, as ``owner``."""
        return cls(owner, socket.gethostname()[:100], os.getpid(), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))

    @classmethod
    def parse(cls, raw: object) -> Holder:
        """The holder a hold's value names (an unreadable value: an unknown holder, not an error)."""
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if not isinstance(value, dict):
            return cls("", "an unknown host", 0, "an unknown time")
        pid = value.get("pid")
        return cls(
            str(value.get("owner", ""))[:100],
            str(value.get("host", "an unknown host"))[:100],
            pid if isinstance(pid, int) else 0,
            str(value.get("since", "an unknown time"))[:40],
        )

    def encode(self) -> str:
        """The hold's value."""
        return json.dumps({"owner": self.owner, "host": self.host, "pid": self.pid, "since": self.since})

    def describe(self) -> str:
        """``pid 123 on host, since 2026-11-27T18:00:00Z``."""
        return f"pid {self.pid or 'unknown'} on {self.host}, since {self.since}"


class SingleDaemonServes(Exception):
    """A daemon without cluster holds the journal: a cluster daemon may not join it."""

    def __init__(self, holder: Holder) -> None:
        super().__init__(f"a daemon without cluster serves the journal ({holder.describe()})")
        self.holder = holder


@dataclass(frozen=True, slots=True)
class Conflict:
    """A conflicting set has live members: ``count`` of them, ``member`` one."""

    key: str
    member: str
    count: int


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class RedisHold:
    """One hold in the journal's Redis (module docstring); its calls wait through outages like the journal's."""

    def __init__(
        self,
        journal: RedisJournal,
        key: str,
        *,
        owner: str,
        ttl: float,
        conflicts: Sequence[str] = (),
    ) -> None:
        self.journal = journal
        self.key = key
        self.ttl = ttl
        self.holder = Holder.here(owner)
        self.conflicts = tuple(conflicts)
        client = journal.client
        self._take = client.register_script(TAKE)
        self._renew = client.register_script(RENEW)
        self._release = client.register_script(RELEASE)

    @property
    def _ttl_ms(self) -> int:
        return max(1, round(self.ttl * 1000))

    async def take(self) -> Holder | Conflict | None:
        """Take the hold; None when taken, else who is in the way."""

        async def run() -> Any:
            return await self._take(
                keys=[self.key, *self.conflicts], args=[self.holder.owner, self.holder.encode(), self._ttl_ms]
            )

        reply = await self.journal.reachability.call(run)
        status = _text(reply[0])
        if status == "held":
            return Holder.parse(reply[1])
        if status == "conflict":
            return Conflict(_text(reply[1]), _text(reply[2])[:100], int(reply[3]))
        return None

    async def renew(self) -> Holder | None:
        """Extend the hold; None when it is still (or again) ours, else the process that took it over."""

        async def run() -> Any:
            return await self._renew(keys=[self.key], args=[self.holder.owner, self.holder.encode(), self._ttl_ms])

        reply = await self.journal.reachability.call(run)
        return Holder.parse(reply[1]) if _text(reply[0]) == "held" else None

    async def release(self) -> None:
        """Give the hold back if it is still ours (a clean stop: the next process needs not wait ``ttl``)."""

        async def run() -> Any:
            return await self._release(keys=[self.key], args=[self.holder.owner])

        await self.journal.reachability.call(run)

    async def keep(self, what: str) -> None:
        """Renew every third of ``ttl`` until cancelled; :class:`HoldLost` (naming ``what`` is held) when another
        process took the hold over."""
        while True:
            await asyncio.sleep(self.ttl / RENEWALS_PER_TTL)
            other = await self.renew()
            if other is not None:
                raise HoldLost(
                    f"{what} was taken over by pid {other.pid or 'unknown'} on {other.host} (since {other.since}):"
                    f" this process did not renew it for {self.ttl:g} s (it was stalled, or short of CPU), so"
                    " two would have served at once. Stop the other one, or this one, and keep one"
                )

    async def release_within(self, seconds: float) -> None:
        """:meth:`release`, given up after ``seconds`` (a Redis that does not answer at shutdown: the hold
        then runs out by itself, ``ttl`` later)."""
        try:
            async with asyncio.timeout(seconds):
                await self.release()
        except Exception as exc:  # (a shutdown step: said, not raised)
            log.warning("could not give back %s at shutdown (%s); it runs out in %g s", self.key, _short(exc), self.ttl)


def daemon_refusal(journal: str, found: Holder | Conflict, ttl: float) -> str:
    """Why a daemon without ``cluster`` may not serve ``journal``, and what to do (the file journal's wording)."""
    if isinstance(found, Conflict):
        return (
            f"the journal {journal} is served by a cluster of {found.count} daemon(s) started with --cluster"
            f" (e.g. {found.member}); a daemon without --cluster beside them would answer their thoughts a second"
            " time. Start this one with --cluster (cluster = true) to join them, or stop them first"
        )
    return (
        f"another coven-codex daemon ({found.describe()}) is serving the journal {journal}; two daemons on one"
        f" journal would answer every thought twice. Stop that daemon first (kill -TERM {found.pid or 'PID'} on"
        f" {found.host}), or give this one its own --journal (a daemon killed without a clean stop holds the"
        f" journal for at most {ttl:g} s more)"
    )


def cluster_refusal(journal: str, holder: Holder) -> str:
    """Why a ``--cluster`` daemon may not join ``journal``: a daemon without ``cluster`` serves it alone."""
    return (
        f"the journal {journal} is served by a coven-codex daemon without --cluster ({holder.describe()}); a"
        " cluster daemon beside it would answer its thoughts a second time. Stop that daemon"
        f" (kill -TERM {holder.pid or 'PID'} on {holder.host}), then start every daemon of this journal with"
        " --cluster, or run this one without --cluster on a journal of its own"
    )


def _short(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."
