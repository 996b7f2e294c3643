"""A mirrored state never relies on rollout lines the copy lacks, against a real redis-server."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import cast

import pytest
from redis.asyncio import Redis

from coven_codex.agent.state import SessionState
from coven_codex.cluster.keys import ClusterKeys
from coven_codex.cluster.leases import LeaseLost
from coven_codex.cluster.mirror import rehydrate
from coven_codex.cluster.node import ClusterNode
from coven_codex.cluster.ownership import Ownership, SessionHost
from coven_codex.journal import START, Position
from coven_codex.journal.redis import RedisJournal
from coven_codex.testing.redis_server import RedisServer

THREAD = "01a20a28-4e4c-78b0-af17-053d23cfeab9"
META = b'{"type":"session_meta","payload":{"id":"' + THREAD.encode() + b'"}}\n'
FIRST = (
    b'{"type":"response_item","payload":{"type":"message","role":"user",'
    b'"content":[{"type":"input_text","text":"thought 1"}]}}\n'
)


class ReaderAt:
    """The one thing mirroring a state asks of the running daemon: where its journal reader is."""

    def read_position(self) -> Position:
        return START


async def test_a_state_is_mirrored_after_the_rollout_lines_it_relies_on(
    redis_server: RedisServer, redis_client: Redis, cluster_keys: ClusterKeys, tmp_path: Path
) -> None:
    """The thread's first turn: the session learnt from the rollout itself that Codex took the thought
    (the turn ended before egress located the file) and saved that. The mirrored state names the
    thread and the thought as delivered, so the copy must hold the rollout's complete lines already:
    a new owner resumes the thread from the copy (with none, ``thread/resume`` fails and a new
    thread without the first turn's history is started)."""
    codex_home = tmp_path / "codex-home"
    rollout = codex_home / "sessions" / "2026" / "11" / "23" / f"rollout-2026-11-23T20-45-43-{THREAD}.jsonl"
    rollout.parent.mkdir(parents=True)
    rollout.write_bytes(META + FIRST + b'{"type":"event_msg","pay')  # Codex is writing its next line
    a = ClusterNode(redis_client, cluster_keys, daemon_id="a", lease_time=10.0)
    assert (await a.claim("red")).ok
    journal = RedisJournal.from_url(redis_server.url(key=cluster_keys.namespace))
    ownership = Ownership(a, journal, codex_home)
    ownership.host = cast(SessionHost, ReaderAt())
    state = SessionState(conversation="red", thread_id=THREAD, delivered={"thought-1": START}, user_messages=1)
    assert state.rollout_path is None  # (egress has not located the file yet)

    await ownership.save_state("red", state.model_dump_json().encode("utf-8"), [])

    record = await a.mirror.load_state("red")
    assert record is not None and THREAD in record.state
    copy = await a.mirror.load_rollout("red")
    assert copy is not None, "the state was mirrored with no copy of the rollout it relies on"
    assert copy.thread_id == THREAD
    assert copy.data == META + FIRST  # complete lines only
    elsewhere = (await asyncio.to_thread(rehydrate, tmp_path / "other-home", copy)).path
    assert elsewhere.relative_to(tmp_path / "other-home") == rollout.relative_to(codex_home)
    await a.leave()
    await journal.aclose()


async def test_a_claim_at_a_thought_leaves_the_floor_there_for_the_next_owner(
    redis_client: Redis, cluster_keys: ClusterKeys
) -> None:
    """a claims a conversation at a thought and dies (or stalls) before it mirrors anything; the
    others passed over that thought and the next ones because a held the lease. b, claiming at a
    later thought, must still find the floor at a's thought, or the thoughts between are never answered."""
    a = ClusterNode(redis_client, cluster_keys, daemon_id="a", lease_time=10.0)
    b = ClusterNode(redis_client, cluster_keys, daemon_id="b", lease_time=10.0)
    assert (await a.claim("red", "1795466898514-0")).ok
    await redis_client.delete(cluster_keys.lease("red"), cluster_keys.holder("red"))  # a's lease ran out
    assert (await b.claim("red", "1795466899000-3")).ok
    assert await b.mirror.load_floor("red") == "1795466898514-0"
    await b.leave()


class HeldAnswers:
    """A TCP relay in front of Redis that passes every command on at once and, once a command
    holding ``hold_after`` has passed (or while ``hold`` is set), keeps Redis's answers back: Redis
    did the write, the daemon learns it later (as when Redis is stopped with ``SIGSTOP`` between a
    command and its answer, or the network holds up)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.hold = False
        self.hold_after: bytes | None = None
        self.released = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)
        tasks = {
            asyncio.create_task(self._pump(reader, up_writer, held=False)),
            asyncio.create_task(self._pump(up_reader, writer, held=True)),
        }
        self._tasks |= tasks
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            task.cancel()
        writer.close()
        up_writer.close()

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, *, held: bool) -> None:
        while data := await source.read(65536):
            if held and self.hold:
                await self.released.wait()
            sink.write(data)
            await sink.drain()
            if not held and self.hold_after is not None and self.hold_after in data:
                self.hold = True  # (the command is on its way: its answer, and every later one, waits)


async def test_a_write_ahead_answered_after_the_lease_ran_out_hands_nothing_over(
    redis_server: RedisServer, redis_client: Redis, cluster_keys: ClusterKeys, tmp_path: Path
) -> None:
    """Seen in a loaded run of test_cluster_outage: Redis did a session's fenced write-ahead (the
    thought in flight) under a valid lease and was frozen before it answered; the answer came once
    it woke, after the lease had run out, and the session handed the thought to Codex then. The
    daemon's renewal found the lease lost at that moment, the session was stopped (its turn
    aborted) and the next owner, finding the thought in the rollout, rightly did not send it again:
    the thought was never answered. Now the lease is confirmed again once the write-ahead is done:
    an answer that comes after half a lease time renews first, and the lease having run out,
    :class:`LeaseLost` stops the hand-over (the next owner sends the thought, not received)."""
    relay = HeldAnswers(redis_server.port)
    port = await relay.start()
    slow = Redis(host="127.0.0.1", port=port)
    a = ClusterNode(slow, cluster_keys, daemon_id="a", lease_time=1.0)
    journal = RedisJournal.from_url(redis_server.url(key=cluster_keys.namespace))
    try:
        assert (await a.claim("red")).ok
        ownership = Ownership(a, journal, tmp_path / "codex-home")
        ownership.host = cast(SessionHost, ReaderAt())
        state = SessionState(conversation="red")
        # A first save, answered: Redis learns the fenced scripts (a script Redis does not know yet
        # is sent again after its "unknown script" answer, which a held answer would stop: run
        # alone, before any other test had Redis load them, the write never happened).
        await ownership.save_state("red", state.model_dump_json().encode("utf-8"), [])
        await redis_client.delete(cluster_keys.state("red"))
        # Answers are held from the fenced write on, not before: a renewal the save may start with
        # (its lease confirmed more than half a lease time ago, on a loaded machine) is answered.
        relay.hold_after = cluster_keys.state("red").encode()
        saving = asyncio.create_task(ownership.save_state("red", state.model_dump_json().encode("utf-8"), []))
        async with asyncio.timeout(30):  # Redis did the write (fenced: under the lease)
            while await redis_client.hget(cluster_keys.state("red"), "writer") != b"a":
                assert not saving.done(), saving
                await asyncio.sleep(0.05)
        assert relay.hold, "the write's answer was not held"
        await asyncio.sleep(1.5)  # the lease (1 s, confirmed before the write) runs out in Redis
        relay.hold = False
        relay.released.set()
        with pytest.raises(LeaseLost):
            await saving
        assert not a.owns("red")
    finally:
        await journal.aclose()
        await slow.aclose()
        await relay.aclose()
