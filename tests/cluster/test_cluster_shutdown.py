"""A cluster daemon's last Redis steps at shutdown stay within their bound when Redis answers nothing
(a ``redis-server`` of the test's own, stopped with SIGSTOP; never the session's)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import cast

import pytest

from coven_codex.agent.state import SessionState, StateStore
from coven_codex.cluster.keys import ClusterKeys
from coven_codex.cluster.node import ClusterNode
from coven_codex.cluster.ownership import Ownership, SessionHost
from coven_codex.journal import START, Position
from coven_codex.journal.redis import RedisJournal
from coven_codex.testing.redis_server import RedisServer


class Host:
    """What letting a conversation go and the last mirror ask of the running daemon."""

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self.stopped: list[str] = []

    async def stop_session(self, conversation: str) -> None:
        self.stopped.append(conversation)

    def serving(self, conversation: str) -> bool:
        return conversation not in self.stopped

    def read_position(self) -> Position:
        return START


async def test_the_hand_over_ends_within_its_bound_while_redis_answers_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis frozen: the last mirror, the hand-over and a conversation being let go (its report to the
    new owner waits for Redis like every call) all end when the shutdown's bound is used up; the
    daemon's task group can then finish, and it is said once that the leases run out instead."""
    with RedisServer(tmp_path / "redis") as redis:
        journal = RedisJournal.from_url(redis.url(key="chat"))
        keys = ClusterKeys("chat")
        node = ClusterNode(journal.client, keys, daemon_id="a", lease_time=10.0, reachability=journal.reachability)
        store = StateStore(tmp_path / "state")
        store.prepare()
        rollout = tmp_path / "codex-home" / "sessions" / "rollout-blue.jsonl"
        rollout.parent.mkdir(parents=True)
        rollout.write_bytes(b'{"type":"session_meta"}\n')
        store.save(SessionState(conversation="blue", rollout_path=str(rollout)))
        ownership = Ownership(node, journal, tmp_path / "codex-home")
        host = Host(store)
        ownership.host = cast(SessionHost, host)
        assert (await node.claim("red")).ok and (await node.claim("blue")).ok
        caplog.set_level(logging.WARNING)
        try:

            async def shut_down() -> None:
                async with asyncio.TaskGroup() as group:
                    refused = ownership.dropper(group)
                    redis.pause()
                    refused("blue")  # a write for blue was refused: blue is let go in a task of its own
                    await asyncio.sleep(0.2)
                    await ownership.final_mirror([(SessionState(conversation="red"), [])], within=1.0)

            await asyncio.wait_for(shut_down(), 20)  # (unbounded, this waits for Redis: 600 s)
        finally:
            redis.resume()
            await journal.aclose()
            store.close()
    assert host.stopped == ["blue"]
    said = [r.getMessage() for r in caplog.records if "could not hand" in r.getMessage()]
    assert len(said) == 1 and "Redis did not answer within 1.0s" in said[0], said
    assert "once the leases run out" in said[0]
