"""One daemon's membership in a cluster: its id, its leases, its heartbeat, its sweeps.

:meth:`ClusterNode.run` is one task: every third of a lease time it renews the heartbeat and
every lease it holds (one pipeline), reports the conversations whose lease was lost, and looks
for conversations nobody holds any more (a dead daemon's, after its lease ran out; a stopped
daemon's, at once: it publishes its hand-over) that go to this daemon by rendezvous hashing.
Between rounds it waits on the hand-over channel, so an idle cluster costs one round trip per
daemon every few seconds and nothing else.

Every Redis call goes through the journal's
:class:`~coven_codex.journal.redis.outage.Reachability`: while Redis cannot be reached, a round
(and every lease check and mirror write of the sessions) waits for it with backoff, and the
outage is said once for the whole daemon, not once per retry. The hand-over channel's own waits
are bounded by the round's interval (a Redis that answers nothing, e.g. stopped with ``SIGSTOP``,
holds up nothing), and so is closing it.

Writes for a conversation carry :meth:`ClusterNode.fence`. Before the write-ahead of a
hand-over to Codex, and again once it is done, :meth:`ClusterNode.fresh` makes sure the lease was
confirmed less than half a lease time ago (renewing now if not), so a thought is handed over only
under a lease that has most of its time left.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.exceptions import RedisError

from coven_codex.cluster.keys import ClusterKeys
from coven_codex.cluster.leases import Claimed, Fence, LeaseLost, Leases
from coven_codex.cluster.mirror import Mirror
from coven_codex.cluster.registry import Registry
from coven_codex.journal.redis.outage import Reachability
from coven_codex.support.backoff import RepeatFilter

log = logging.getLogger(__name__)

ROUNDS_PER_LEASE = 3
"""Renewals per lease time: a lease survives two lost rounds."""
FRESH_FRACTION = 0.5
"""A hand-over needs a lease confirmed less than this fraction of a lease time ago."""
CLOSE_TIMEOUT = 1.0
"""Closing the hand-over channel's connection takes at most this (seconds), and so does a hang inside
redis-py past the end of a wait on it (subscribing, reconnecting)."""

LostHandler = Callable[[list[str]], Awaitable[None]]
OrphanHandler = Callable[[list[str]], Awaitable[None]]


class ClusterNode:
    """This daemon in the cluster (module docstring)."""

    def __init__(
        self,
        redis: Redis,
        keys: ClusterKeys,
        *,
        daemon_id: str,
        lease_time: float,
        reachability: Reachability | None = None,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.daemon_id = daemon_id
        self.lease_time = lease_time
        self.reachability = reachability or Reachability(f"(cluster {keys.namespace[:60]})")
        """The journal's (the daemon shares one for the journal and the cluster: one outage, said once)."""
        reach = self.reachability
        self.leases = Leases(redis, keys, daemon_id=daemon_id, ttl=lease_time, reachability=reach)
        self.registry = Registry(redis, keys, daemon_id=daemon_id, ttl=lease_time, reachability=reach)
        self.mirror = Mirror(redis, keys, daemon_id=daemon_id, reachability=reach)
        self.held: dict[str, int] = {}
        """Conversation → our fencing token, for every lease we believe we hold."""
        self._confirmed: dict[str, float] = {}
        """Conversation → monotonic time at which the renewal that confirmed it was sent."""
        self._wake = asyncio.Event()
        self._failures = RepeatFilter()
        self._late = RepeatFilter()

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
        """Enter the live set (before the first claim, so rendezvous hashing counts us); refused
        (:class:`~coven_codex.cluster.registry.SingleDaemonServes`) while a daemon without cluster serves
        the journal."""
        await self.registry.heartbeat(joining=True)

    async def run(self, on_lost: LostHandler, on_orphans: OrphanHandler) -> None:
        """Renew, report lost leases, adopt orphaned conversations; until cancelled (module docstring)."""
        interval = self.lease_time / ROUNDS_PER_LEASE
        handovers = Handovers(self.redis, self.keys.handover)
        loop = asyncio.get_running_loop()
        due: float | None = None
        try:
            while True:
                started = loop.time()
                if due is not None:
                    self._note_lateness(started - due, interval)
                try:
                    await self._round(on_lost, on_orphans)
                    self._failures.clear()
                except RedisError as exc:  # (an unreachable Redis is waited for: this one answered "no")
                    note = self._failures.note(type(exc).__name__)
                    if note is not None:
                        log.warning(
                            "cluster: Redis refused a renewal round (%s); leases are renewed once it accepts them %s",
                            str(exc)[:200],
                            note,
                        )
                # Rounds are an interval apart from start to start: the time a round took (its claims and
                # sweeps under load) does not push the next renewal back.
                due = max(started + interval, loop.time())
                await handovers.wait(due - loop.time())
        finally:
            await handovers.close()

    def _note_lateness(self, late: float, interval: float) -> None:
        """Say (once, then in summaries) when a renewal round starts more than a round's interval after
        it was due: the daemon is short of CPU or its event loop is blocked, and its leases may run
        out (its conversations then move to other daemons). Time spent waiting for Redis is not counted."""
        if late <= interval:
            return  # (not cleared: lateness on and off is one condition, said once and then summed up)
        note = self._late.note("late")
        if note is not None:
            log.warning(
                "cluster: a lease renewal started %.1fs late (a lease lasts %gs and is renewed every %.1fs):"
                " this daemon is short of CPU or its event loop is blocked, so its conversations may move to"
                " other daemons; give it more CPU or a longer lease_time %s",
                late,
                self.lease_time,
                interval,
                note,
            )

    async def _round(self, on_lost: LostHandler, on_orphans: OrphanHandler) -> None:
        held = dict(self.held)
        sent = time.monotonic()
        # (At once, on two connections: one round trip's wait, not two, for a daemon short of CPU.)
        beat = asyncio.create_task(self.registry.heartbeat(), name="cluster-heartbeat")
        try:
            lost = await self.leases.renew(held)
        except BaseException:
            beat.cancel()
            await asyncio.gather(beat, return_exceptions=True)
            raise
        await beat
        took = time.monotonic() - sent
        if took > self.lease_time / ROUNDS_PER_LEASE / 2:
            log.debug("cluster: heartbeat and renewal of %d lease(s) took %.2fs", len(held), took)
        for conversation, token in held.items():
            if conversation not in lost and self.held.get(conversation) == token:
                self._confirmed[conversation] = sent
        lost = [c for c in lost if self.held.get(c) == held[c]]
        if lost:
            for conversation in lost:
                self.drop(conversation)
            log.warning("cluster: lost the lease of %d conversation(s); another daemon serves them now", len(lost))
            await on_lost(lost)
        if self.registry.away:
            # Back after our heartbeat ran out (a stall, or Redis unreachable past a lease time: then every
            # daemon's ran out): the others have not said they are back yet, and sweeping now would take
            # their conversations too. They heartbeat within a round; sweep then.
            return
        orphans = [c for c in await self.leases.expired() if c not in self.held and self.preferred(c)]
        if orphans:
            await on_orphans(orphans)

    # -- leaving -----------------------------------------------------------------------------------
    async def leave(self) -> None:
        """Give every lease back and leave the live set; the others take over at once. Waits for an
        unreachable Redis like every call (the caller bounds it: a shutdown does)."""
        held = dict(self.held)
        await self.leases.release(held)
        await self.registry.leave()

        async def publish() -> object:
            return await self.redis.publish(self.keys.handover, self.daemon_id)

        await self.reachability.call(publish)
        for conversation in held:
            self.drop(conversation)
        log.info("cluster: handed %d conversation(s) over", len(held))


class Handovers:
    """The hand-over channel of a cluster, as one daemon listens to it between its rounds.

    :meth:`wait` subscribes when it is not subscribed and waits for a message, every step within
    the time it is given: a Redis that is gone or answers nothing costs that time and no more
    (the connection is then dropped and the next wait subscribes again; a hand-over missed
    meanwhile is found by the next sweep, at the latest a lease time later).
    """

    def __init__(self, redis: Redis, channel: str) -> None:
        self._redis = redis
        self._channel = channel
        self._pubsub: PubSub | None = None

    async def wait(self, interval: float) -> None:
        """Return after ``interval`` seconds, or sooner when another daemon publishes a hand-over."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + interval
        try:
            # (The outer bound catches a hang inside redis-py: subscribing, reconnecting to a Redis
            # that accepts connections and answers nothing; get_message's own timeout ends the wait.)
            async with asyncio.timeout_at(deadline + CLOSE_TIMEOUT):
                if self._pubsub is None:
                    self._pubsub = self._redis.pubsub()
                    await self._pubsub.subscribe(self._channel)
                while (left := deadline - loop.time()) > 0:
                    message = await self._pubsub.get_message(ignore_subscribe_messages=True, timeout=left)
                    if message is not None:
                        return
        except (RedisError, OSError):  # (TimeoutError is an OSError)
            await self.close()
            await asyncio.sleep(max(0.0, deadline - loop.time()))

    async def close(self) -> None:
        """Drop the channel's connection (at most :data:`CLOSE_TIMEOUT` seconds)."""
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is None:
            return
        with contextlib.suppress(RedisError, OSError, RuntimeError):
            await asyncio.wait_for(pubsub.aclose(), CLOSE_TIMEOUT)  # type: ignore[no-untyped-call]
