"""One daemon's membership in a cluster: its id, its leases, its heartbeat, its sweeps.

:meth:`ClusterNode.run` is one task: every third of a lease time it renews the heartbeat and
every lease it holds (one pipeline), reports the conversations whose lease was lost, and looks
for conversations nobody holds any more (a dead daemon's, after its lease ran out; a stopped
daemon's, at once: it publishes its hand-over) that go to this daemon by rendezvous hashing.
Between rounds it waits on the hand-over channel, so an idle cluster costs one round trip per
daemon every few seconds and nothing else.

Writes for a conversation carry :meth:`ClusterNode.fence`. Before the write-ahead of a
hand-over to Codex, :meth:`ClusterNode.fresh` makes sure the lease was confirmed less than half
a lease time ago (renewing now if not), so a thought is handed over only under a lease that has
most of its time left.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from redis.asyncio import Redis
from redis.exceptions import RedisError

from coven_codex.agent.backoff import RepeatFilter
from coven_codex.cluster.keys import ClusterKeys
from coven_codex.cluster.leases import Claimed, Fence, LeaseLost, Leases
from coven_codex.cluster.mirror import Mirror
from coven_codex.cluster.registry import Registry

log = logging.getLogger(__name__)

ROUNDS_PER_LEASE = 3
"""Renewals per lease time: a lease survives two lost rounds."""
FRESH_FRACTION = 0.5
"""A hand-over needs a lease confirmed less than this fraction of a lease time ago."""

LostHandler = Callable[[list[str]], Awaitable[None]]
OrphanHandler = Callable[[list[str]], Awaitable[None]]


class ClusterNode:
    """This daemon in the cluster (module docstring)."""

    def __init__(self, redis: Redis, keys: ClusterKeys, *, daemon_id: str, lease_time: float) -> None:
        self.redis = redis
        self.keys = keys
        self.daemon_id = daemon_id
        self.lease_time = lease_time
        self.leases = Leases(redis, keys, daemon_id=daemon_id, ttl=lease_time)
        self.registry = Registry(redis, keys, daemon_id=daemon_id, ttl=lease_time)
        self.mirror = Mirror(redis, keys, daemon_id=daemon_id)
        self.held: dict[str, int] = {}
        """Conversation → our fencing token, for every lease we believe we hold."""
        self._confirmed: dict[str, float] = {}
        """Conversation → monotonic time at which the renewal that confirmed it was sent."""
        self._wake = asyncio.Event()
        self._failures = RepeatFilter()

    # -- ownership -------------------------------------------------------------------------------
    def owns(self, conversation: str) -> bool:
        """Whether we believe we hold ``conversation``'s lease (Redis has the last word on writes)."""
        return conversation in self.held

    def token(self, conversation: str) -> int:
        """Our fencing token for ``conversation``; :class:`LeaseLost` when we do not hold it."""
        token = self.held.get(conversation)
        if token is None:
            raise LeaseLost(conversation)
        return token

    def fence(self, conversation: str) -> Fence:
        """The fence every write for ``conversation`` carries; :class:`LeaseLost` when not held."""
        return self.leases.fence(conversation, self.token(conversation))

    async def fresh(self, conversation: str) -> int:
        """Our token, with the lease confirmed less than half a lease time ago (renewed now if older)."""
        token = self.token(conversation)
        confirmed = self._confirmed.get(conversation, 0.0)
        if time.monotonic() - confirmed < FRESH_FRACTION * self.lease_time:
            return token
        sent = time.monotonic()
        lost = await self.leases.renew({conversation: token})
        if lost:
            self.drop(conversation)
            raise LeaseLost(conversation)
        self._confirmed[conversation] = sent
        return token

    async def claim(self, conversation: str, at: str = "") -> Claimed:
        """Try to take ``conversation``'s lease; held from now on when the claim succeeded. ``at``: the
        position (text) of the thought it is claimed for, the conversation's floor unless one is known."""
        token = self.held.get(conversation)
        if token is not None:  # (claiming again would bump the token and fence out our own writes)
            return Claimed(True, token, self.daemon_id)
        sent = time.monotonic()
        claimed = await self.leases.claim(conversation, at)
        if claimed.ok:
            self.held[conversation] = claimed.token
            self._confirmed[conversation] = sent
        return claimed

    def drop(self, conversation: str) -> None:
        """Forget our lease on ``conversation`` (lost, or given back)."""
        self.held.pop(conversation, None)
        self._confirmed.pop(conversation, None)
        self.mirror.forget(conversation)

    def preferred(self, conversation: str) -> bool:
        """Whether ``conversation``, held by nobody, goes to this daemon."""
        return self.registry.preferred(conversation)

    # -- the loop ----------------------------------------------------------------------------------
    async def join(self) -> None:
        """Enter the live set (before the first claim, so rendezvous hashing counts us)."""
        await self.registry.heartbeat()

    async def run(self, on_lost: LostHandler, on_orphans: OrphanHandler) -> None:
        """Renew, report lost leases, adopt orphaned conversations; until cancelled (module docstring)."""
        pubsub = self.redis.pubsub()
        interval = self.lease_time / ROUNDS_PER_LEASE
        try:
            with contextlib.suppress(RedisError, OSError):
                await pubsub.subscribe(self.keys.handover)
            while True:
                try:
                    await self._round(on_lost, on_orphans)
                    self._failures.clear()
                except (RedisError, OSError) as exc:
                    note = self._failures.note(type(exc).__name__)
                    if note is not None:
                        log.warning(
                            "cluster: cannot reach Redis (%s); leases are renewed once it answers %s",
                            str(exc)[:200],
                            note,
                        )
                await self._pause(pubsub, interval)
        finally:
            with contextlib.suppress(RedisError, OSError, RuntimeError):
                await pubsub.aclose()  # type: ignore[no-untyped-call]

    async def _pause(self, pubsub: object, interval: float) -> None:
        """Wait ``interval`` seconds, less when another daemon publishes a hand-over."""
        get_message = getattr(pubsub, "get_message", None)
        if get_message is None or not getattr(pubsub, "subscribed", False):
            await asyncio.sleep(interval)
            return
        deadline = time.monotonic() + interval
        while (left := deadline - time.monotonic()) > 0:
            try:
                message = await get_message(ignore_subscribe_messages=True, timeout=left)
            except (RedisError, OSError):
                await asyncio.sleep(left)
                return
            if message is not None:
                return

    async def _round(self, on_lost: LostHandler, on_orphans: OrphanHandler) -> None:
        await self.registry.heartbeat()
        held = dict(self.held)
        sent = time.monotonic()
        lost = await self.leases.renew(held)
        for conversation, token in held.items():
            if conversation not in lost and self.held.get(conversation) == token:
                self._confirmed[conversation] = sent
        lost = [c for c in lost if self.held.get(c) == held[c]]
        if lost:
            for conversation in lost:
                self.drop(conversation)
            log.warning("cluster: lost the lease of %d conversation(s); another daemon serves them now", len(lost))
            await on_lost(lost)
        orphans = [c for c in await self.leases.expired() if c not in self.held and self.preferred(c)]
        if orphans:
            await on_orphans(orphans)

    # -- leaving -----------------------------------------------------------------------------------
    async def leave(self) -> None:
        """Give every lease back and leave the live set; the others take over at once."""
        held = dict(self.held)
        try:
            await self.leases.release(held)
            await self.registry.leave()
            await self.redis.publish(self.keys.handover, self.daemon_id)
        except (RedisError, OSError) as exc:
            log.warning(
                "cluster: could not hand %d conversation(s) over (%s); the others take them once the leases run out",
                len(held),
                str(exc)[:200],
            )
            return
        for conversation in held:
            self.drop(conversation)
        log.info("cluster: handed %d conversation(s) over", len(held))
