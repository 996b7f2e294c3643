"""Leases: each conversation is owned by one daemon at a time, with a fencing token.

A lease is ``SET lease <token> PX ttl`` where the token comes from the conversation's own
``INCR`` counter, so every claim has a larger token than the one before. Renewal is a
compare-and-extend script, release a compare-and-delete, both keyed on the token. Every write
the owner makes for the conversation (journal appends, the mirrored state and rollout) is a
script that first checks that the lease still holds its token: a daemon that stalled past its
lease finds another token there and its write is refused (:class:`LeaseLost`), whatever its own
clock believes. Times are Redis's (``TIME`` inside the scripts). Every call goes through the
journal's :class:`~coven_codex.journal.redis.outage.Reachability`: while Redis cannot be reached it
waits for it (with backoff, said once), and a cancelled call really ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from coven_codex.agent.lease_lost import LeaseLost
from coven_codex.cluster import scripts
from coven_codex.cluster.keys import ClusterKeys
from coven_codex.journal.redis.outage import Reachability

__all__ = ["Claimed", "Fence", "LeaseLost", "Leases"]


@dataclass(frozen=True, slots=True)
class Fence:
    """What a fenced write carries: the lease key and the token it must still hold."""

    key: str
    token: int


@dataclass(frozen=True, slots=True)
class Claimed:
    """A claim's outcome: ``token`` is ours when ``ok``, else the holder's, and ``holder`` who holds it."""

    ok: bool
    token: int
    holder: str


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class Leases:
    """The lease scripts for one cluster (module docstring)."""

    def __init__(
        self, redis: Redis, keys: ClusterKeys, *, daemon_id: str, ttl: float, reachability: Reachability
    ) -> None:
        self._redis = redis
        self._reachability = reachability
        self.keys = keys
        self.daemon_id = daemon_id
        self.ttl_ms = max(1, round(ttl * 1000))
        self._claim = redis.register_script(scripts.CLAIM)
        self._renew = redis.register_script(scripts.RENEW)
        self._release = redis.register_script(scripts.RELEASE)
        self._note = redis.register_script(scripts.NOTE_UNCLAIMED)
        self._expired = redis.register_script(scripts.EXPIRED)

    def fence(self, conversation: str, token: int) -> Fence:
        """The fence of our lease on ``conversation`` with ``token``."""
        return Fence(self.keys.lease(conversation), token)

    async def claim(self, conversation: str, at: str = "") -> Claimed:
        """Take the lease when it is free (or held by this same daemon id, restarted); ``at``: the
        position of the thought we claim it for (the floor unless one is known), or ``""``."""
        k = self.keys
        keys = [
            k.lease(conversation),
            k.holder(conversation),
            k.counter(conversation),
            k.expiry,
            k.floor(conversation),
        ]

        async def run() -> Any:
            # (A claim retried after a lost reply finds the lease held by this very id: it takes a
            # newer token, the only one it then knows.)
            return await self._claim(
                keys=keys, args=[self.daemon_id, self.ttl_ms, conversation, at, k.report(conversation, "")]
            )

        ok, token, holder = await self._reachability.call(run)
        return Claimed(bool(int(ok)), int(_text(token)), _text(holder))

    async def renew(self, held: dict[str, int]) -> list[str]:
        """Extend every lease in ``held`` (conversation → token); the conversations whose lease is lost."""
        if not held:
            return []
        k = self.keys

        async def run() -> list[Any]:
            async with self._redis.pipeline(transaction=False) as pipe:
                for conversation, token in held.items():
                    await self._renew(
                        keys=[k.lease(conversation), k.holder(conversation), k.expiry],
                        args=[token, self.ttl_ms, conversation],
                        client=pipe,
                    )
                return await pipe.execute()

        results = await self._reachability.call(run)
        return [conversation for conversation, ok in zip(held, results, strict=True) if not int(ok)]

    async def release(self, held: dict[str, int]) -> None:
        """Give every lease in ``held`` back at once (a clean stop hands the conversations over)."""
        if not held:
            return
        k = self.keys

        async def run() -> None:
            async with self._redis.pipeline(transaction=False) as pipe:
                for conversation, token in held.items():
                    await self._release(
                        keys=[k.lease(conversation), k.holder(conversation), k.expiry],
                        args=[token, conversation],
                        client=pipe,
                    )
                await pipe.execute()

        await self._reachability.call(run)

    async def note_unclaimed(self, conversation: str, position: str) -> None:
        """We passed over a thought of a conversation nobody holds (see :data:`scripts.NOTE_UNCLAIMED`)."""
        k = self.keys

        async def run() -> Any:
            return await self._note(
                keys=[k.lease(conversation), k.expiry, k.floor(conversation)],
                args=[self.ttl_ms, conversation, position],
            )

        await self._reachability.call(run)

    async def expired(self, limit: int = 1000) -> list[str]:
        """Conversations whose lease ran out, was released, or was never taken within a lease time."""

        async def run() -> Any:
            return await self._expired(keys=[self.keys.expiry], args=[limit])

        found = await self._reachability.call(run)
        return [_text(item) for item in found]

    async def holder(self, conversation: str) -> str | None:
        """The daemon id holding ``conversation``'s lease, or None when it is free."""

        async def run() -> Any:
            return await self._redis.get(self.keys.holder(conversation))

        value = await self._reachability.call(run)
        return None if value is None else _text(value)
