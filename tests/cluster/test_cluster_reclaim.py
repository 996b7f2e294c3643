"""A conversation whose lease was lost is claimed again only once its old session here is gone.

Found by the failover chaos test under load: a daemon woke from a stall past its leases; the renewal
round found 26 lost and began stopping their sessions one after another; meanwhile its reader met a
new thought of one of them, nobody held it, this daemon was the one it goes to, and it claimed it at
once. The new token then served the old session too (a write looks its token up by conversation):
the old session went on handing its queued thoughts to Codex beside the new one (a thought twice, or
a later thought before earlier ones), and the late stop then stopped the *new* session, taking the
new thought's pending position with it (a thought never answered).

Against a real ``redis-server`` and the Redis journal; the daemon's side is a stand-in that records
what ownership asks of it and holds the old session's stop until the test lets it finish.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from coven_codex.agent.state import SessionState, StateStore
from coven_codex.cluster.keys import ClusterKeys
from coven_codex.cluster.node import ClusterNode
from coven_codex.cluster.ownership import Ownership
from coven_codex.entries import ThoughtEntry
from coven_codex.journal import START, JournalItem, JournalRecord, Position
from coven_codex.journal.redis import RedisJournal
from coven_codex.metrics.instruments import Instruments
from coven_codex.testing.redis_server import RedisServer

LEASE = 1.0


class Daemonside:
    """What ownership asks of the running daemon, recorded; stopping a session waits for ``let_stop``."""

    def __init__(self, state_dir: Path) -> None:
        self.store = StateStore(state_dir)
        self.store.sessions_dir.mkdir(parents=True)
        self.events: list[str] = []
        self.sessions: set[str] = set()
        self.overlaps: list[str] = []
        """Conversations a session was started for while one of theirs still ran or was stopping."""
        self.stopping = asyncio.Event()
        self.let_stop = asyncio.Event()
        self.replayed: list[str] = []
        self.started = asyncio.Event()
        self.answered = asyncio.Event()
        """Set once "thought 2" is routed."""

    async def recover(self, state: SessionState) -> None:
        self.events.append(f"recover {state.conversation}")

    async def end_lost_turn(self, state: SessionState) -> None:
        self.events.append(f"end lost turn {state.conversation}")

    async def received(self, state: SessionState) -> bool:
        return False

    def start_session(self, state: SessionState) -> None:
        if state.conversation in self.sessions:
            self.overlaps.append(state.conversation)
        self.sessions.add(state.conversation)
        self.events.append(f"start {state.conversation}")
        self.started.set()

    async def stop_session(self, conversation: str) -> None:
        if conversation not in self.sessions:
            return
        self.events.append(f"stopping {conversation}")
        self.stopping.set()
        await self.let_stop.wait()  # (letting its Codex thread go takes a while under load)
        self.sessions.discard(conversation)
        self.events.append(f"stopped {conversation}")

    def serving(self, conversation: str) -> bool:
        return conversation in self.sessions

    async def replay(self, items: list[JournalItem]) -> None:
        for item in items:
            assert isinstance(item, JournalRecord)
            self.replayed.append(item.entry.text if isinstance(item.entry, ThoughtEntry) else "?")
        if "thought 2" in self.replayed:
            self.answered.set()

    def read_position(self) -> Position:
        return START

    def storage_failed(self, failure: BaseException) -> None:
        raise AssertionError(f"storage failed: {failure}")

    async def unload_thread(self, thread_id: str) -> None:
        self.events.append(f"unload {thread_id}")


@pytest.fixture
async def journal(redis_server: RedisServer, cluster_keys: ClusterKeys) -> AsyncIterator[RedisJournal]:
    journal = RedisJournal.from_url(redis_server.url(key=cluster_keys.namespace))
    yield journal
    await journal.aclose()


async def until(condition: asyncio.Event, what: str) -> None:
    try:
        async with asyncio.timeout(30):
            await condition.wait()
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


async def test_a_lost_conversation_is_claimed_again_only_after_its_old_session_stopped(
    redis_client: Redis, cluster_keys: ClusterKeys, journal: RedisJournal, tmp_path: Path
) -> None:
    node = ClusterNode(redis_client, cluster_keys, daemon_id="a", lease_time=LEASE)
    await node.join()
    ownership = Ownership(node, journal, tmp_path / "codex-home")
    host = Daemonside(tmp_path / "state")
    async with asyncio.TaskGroup() as group:
        running = ownership.serve(host, group)
        try:
            first = await journal.append(ThoughtEntry(conversation="red", text="thought 1"))
            await ownership.admit(first)  # nobody holds red; we are the only daemon: we claim and adopt it
            await until(host.started, "the first adoption")
            host.started.clear()
            assert node.owns("red")

            # The lease runs out behind our back (we stalled past it); the renewal round finds it lost
            # and starts stopping the session, which takes a while.
            await redis_client.delete(cluster_keys.lease("red"), cluster_keys.holder("red"))
            await until(host.stopping, "the old session's stop")
            assert not node.owns("red")

            # A new thought of red meanwhile: nobody holds it and it goes to us, but our old session is
            # still here. It must not be claimed now.
            second = await journal.append(ThoughtEntry(conversation="red", text="thought 2"))
            assert await ownership.admit(second) is False
            assert not node.owns("red"), "claimed again while the old session was still being stopped"
            assert await node.leases.holder("red") is None

            # Once the old session is gone, the sweep adopts red from its floor: the new thought is answered.
            host.let_stop.set()
            await until(host.started, "the adoption after the old session stopped")
            await until(host.answered, "the new thought, re-read from the floor")
            assert node.owns("red")
        finally:
            running.cancel()
            ownership.closing()
    assert host.overlaps == [], f"a session was started while the old one still ran: {host.events}"
    last_start = max(i for i, event in enumerate(host.events) if event == "start red")
    assert host.events.index("stopped red") < last_start, host.events
    await node.leave()


async def test_a_conversation_moving_between_daemons_counts_out_on_the_old_owner_and_in_on_the_new(
    redis_client: Redis, cluster_keys: ClusterKeys, journal: RedisJournal, tmp_path: Path
) -> None:
    """``coven_leases_moved_total``: daemon b serves blue and loses its lease while the session runs
    (``out``); daemon a then takes blue over from b's mirrored state (``in``)."""
    old = ClusterNode(redis_client, cluster_keys, daemon_id="b", lease_time=LEASE)
    await old.join()
    old_ownership = Ownership(old, journal, tmp_path / "b" / "codex-home")
    old_ownership.instruments = old_metrics = Instruments()
    old_host = Daemonside(tmp_path / "b" / "state")
    old_host.let_stop.set()
    async with asyncio.TaskGroup() as group:
        running = old_ownership.serve(old_host, group)
        try:
            await old_ownership.admit(await journal.append(ThoughtEntry(conversation="blue", text="thought 1")))
            await until(old_host.started, "b's adoption")
            await redis_client.delete(cluster_keys.lease("blue"), cluster_keys.holder("blue"))
            await until(old_host.stopping, "b's session stopping after its lease was lost")
        finally:
            running.cancel()
            old_ownership.closing()
    await old.leave()
    assert old_metrics.registry.get_sample_value("coven_leases_moved_total", {"direction": "out"}) == 1
    assert old_metrics.registry.get_sample_value("coven_leases_moved_total", {"direction": "in"}) is None

    new = ClusterNode(redis_client, cluster_keys, daemon_id="a", lease_time=LEASE)
    await new.join()
    ownership = Ownership(new, journal, tmp_path / "a" / "codex-home")
    ownership.instruments = metrics = Instruments()
    host = Daemonside(tmp_path / "a" / "state")
    async with asyncio.TaskGroup() as group:
        running = ownership.serve(host, group)
        try:
            await ownership.admit(await journal.append(ThoughtEntry(conversation="blue", text="thought 2")))
            await until(host.started, "a's adoption of blue from b")
        finally:
            running.cancel()
            ownership.closing()
    await new.leave()
    assert metrics.registry.get_sample_value("coven_leases_moved_total", {"direction": "in"}) == 1
    assert metrics.registry.get_sample_value("coven_leases_moved_total", {"direction": "out"}) is None
