"""The live daemons of a cluster, and which of them a new conversation goes to.

Every daemon adds itself to a sorted set scored by when its heartbeat runs out (Redis's clock)
and renews it with its leases; a daemon whose heartbeat ran out is no longer live. A
conversation nobody holds goes to the live daemon with the highest rendezvous hash of (daemon,
conversation): every daemon computes the same choice from the same list, the conversations
spread evenly, and when a daemon leaves only its own conversations move.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from redis.asyncio import Redis

from coven_codex.cluster import scripts
from coven_codex.cluster.keys import ClusterKeys
from coven_codex.journal.redis.holds import Holder, SingleDaemonServes
from coven_codex.journal.redis.outage import Reachability


def rendezvous(conversation: str, daemons: Iterable[str]) -> str | None:
    """The daemon ``conversation`` goes to among ``daemons`` (highest hash of the pair), or None."""
    best: tuple[bytes, str] | None = None
    for daemon in daemons:
        score = hashlib.sha256(f"{daemon}\0{conversation}".encode("utf-8", "surrogatepass")).digest()
        if best is None or (score, daemon) > best:
            best = (score, daemon)
    return None if best is None else best[1]


class Registry:
    """This daemon's entry in the live-daemon set (module docstring)."""

    def __init__(
        self, redis: Redis, keys: ClusterKeys, *, daemon_id: str, ttl: float, reachability: Reachability
    ) -> None:
        self._redis = redis
        self._reachability = reachability
        self._keys = keys
        self.daemon_id = daemon_id
        self._ttl_ms = max(1, round(ttl * 1000))
        self._heartbeat = redis.register_script(scripts.HEARTBEAT)
        self.live: tuple[str, ...] = ()
        """The live daemons as of the last heartbeat (this one included)."""
        self.away = True
        """At the last heartbeat this daemon was not in the live set (it just joined, or its heartbeat
        had run out): daemons back with it may not have said so yet, so :attr:`live` may lack them."""

    async def heartbeat(self, *, joining: bool = False) -> tuple[str, ...]:
        """Say we are alive for another lease time; returns (and keeps) the live daemons. ``joining``: refuse
        (:class:`SingleDaemonServes`, nothing written) while a daemon without cluster holds the journal."""
        keys = [self._keys.daemons, self._keys.single_daemon] if joining else [self._keys.daemons]

        async def run() -> Any:
            return await self._heartbeat(keys=keys, args=[self.daemon_id, self._ttl_ms])

        was_live, found = await self._reachability.call(run)
        if int(was_live) < 0:
            raise SingleDaemonServes(Holder.parse(found[0]))
        self.away = not int(was_live)
        self.live = tuple(sorted(item.decode() if isinstance(item, bytes) else str(item) for item in found))
        return self.live

    async def leave(self) -> None:
        """Leave the live set (a clean stop): new conversations go to the others at once."""

        async def run() -> Any:
            return await self._redis.zrem(self._keys.daemons, self.daemon_id)

        await self._reachability.call(run)

    def preferred(self, conversation: str) -> bool:
        """Whether ``conversation``, held by nobody, goes to this daemon."""
        return rendezvous(conversation, self.live or (self.daemon_id,)) == self.daemon_id
