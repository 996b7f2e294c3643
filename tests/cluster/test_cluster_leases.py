"""Leases, fencing, the live-daemon registry and the mirror, against a real redis-server."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest
from redis.asyncio import Redis

from coven_codex.cluster.keys import ClusterKeys
from coven_codex.cluster.leases import LeaseLost
from coven_codex.cluster.mirror import MirroredRollout, rehydrate
from coven_codex.cluster.node import ClusterNode
from coven_codex.cluster.registry import rendezvous


def node(redis: Redis, keys: ClusterKeys, name: str, lease: float = 10.0) -> ClusterNode:
    return ClusterNode(redis, keys, daemon_id=name, lease_time=lease)


async def test_one_holder_at_a_time_and_tokens_only_grow(redis_client: Redis, cluster_keys: ClusterKeys) -> None:
    a, b = node(redis_client, cluster_keys, "a"), node(redis_client, cluster_keys, "b")
    first = await a.claim("red")
    assert first.ok and first.holder == "a"
    refused = await b.claim("red")
    assert not refused.ok and refused.holder == "a" and refused.token == first.token
    await a.leave()
    second = await b.claim("red")
    assert second.ok and second.token > first.token


async def test_a_stalled_owner_cannot_write_after_its_lease_ran_out(
    redis_client: Redis, cluster_keys: ClusterKeys, tmp_path: Path
) -> None:
    """Fencing, not timing: a's token is refused by Redis once b has claimed, whatever a believes."""
    a, b = node(redis_client, cluster_keys, "a", lease=1.0), node(redis_client, cluster_keys, "b", lease=1.0)
    assert (await a.claim("red")).ok
    await a.mirror.save_state("red", a.token("red"), '{"conversation": "red"}', "5")
    await asyncio.sleep(1.3)  # a "stalls" past its lease: no renewal
    assert (await b.claim("red")).ok
    await b.mirror.save_state("red", b.token("red"), '{"conversation": "red", "user_messages": 2}', "9")
    assert a.owns("red")  # a has not noticed yet ...
    with pytest.raises(LeaseLost):  # ... but Redis refuses its write
        await a.mirror.save_state("red", a.token("red"), '{"conversation": "red"}', "5")
    rollout = tmp_path / "sessions" / "rollout-x.jsonl"
    rollout.parent.mkdir(parents=True)
    rollout.write_bytes(b'{"a": 1}\n')
    with pytest.raises(LeaseLost):
        await a.mirror.copy_rollout("red", a.token("red"), thread_id="t", codex_home=tmp_path, rollout=rollout, end=9)
    with pytest.raises(LeaseLost):
        await a.fresh("red")  # the renewal says so too, and a forgets the lease
    assert not a.owns("red")
    record = await b.mirror.load_state("red")
    assert record is not None and record.writer == "b" and "user_messages" in record.state
    assert await b.mirror.load_floor("red") == "9"


async def test_renewal_keeps_a_lease_past_its_time_and_reports_a_lost_one(
    redis_client: Redis, cluster_keys: ClusterKeys
) -> None:
    a, b = node(redis_client, cluster_keys, "a", lease=1.0), node(redis_client, cluster_keys, "b", lease=1.0)
    assert (await a.claim("red")).ok
    assert (await a.claim("blue")).ok
    lost: list[str] = []

    async def on_lost(conversations: list[str]) -> None:
        lost.extend(conversations)

    async def on_orphans(conversations: list[str]) -> None:
        return None

    runner = asyncio.create_task(a.run(on_lost, on_orphans))
    try:
        await asyncio.sleep(2.5)  # two and a half lease times: only renewal keeps them
        assert not (await b.claim("red")).ok
        await redis_client.delete(cluster_keys.lease("blue"))  # an operator (or an expiry) took it away
        deadline = asyncio.get_running_loop().time() + 3
        while not lost and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        assert lost == ["blue"] and a.owns("red") and not a.owns("blue")
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)


async def test_a_dead_daemons_conversations_are_swept_up_and_a_stopped_ones_at_once(
    redis_client: Redis, cluster_keys: ClusterKeys
) -> None:
    a, b = node(redis_client, cluster_keys, "a", lease=1.0), node(redis_client, cluster_keys, "b", lease=1.0)
    await a.join()
    await b.join()
    for conversation in ("c1", "c2", "c3", "c4"):
        assert (await a.claim(conversation)).ok
    adopted: list[str] = []

    async def on_lost(conversations: list[str]) -> None:
        return None

    async def on_orphans(conversations: list[str]) -> None:
        for conversation in conversations:
            if (await b.claim(conversation)).ok:
                adopted.append(conversation)

    runner = asyncio.create_task(b.run(on_lost, on_orphans))
    try:
        loop = asyncio.get_running_loop()
        started = loop.time()
        while len(adopted) < 4 and loop.time() - started < 5:  # a "died": no renewal, no heartbeat
            await asyncio.sleep(0.05)
        assert sorted(adopted) == ["c1", "c2", "c3", "c4"]
        assert loop.time() - started >= 0.9  # not before a's leases ran out
        assert (await a.leases.claim("c1")).holder == "b"  # (the script: a still believes it holds c1)
        # A clean stop hands over at once (released leases, a published hand-over), no lease time.
        assert (await a.claim("c5")).ok
        released = loop.time()
        await a.leave()
        while "c5" not in adopted and loop.time() - released < 5:
            await asyncio.sleep(0.02)
        assert "c5" in adopted and loop.time() - released < 0.9
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)


async def test_back_after_an_outage_past_the_lease_a_daemon_sweeps_only_once_the_others_can_say_they_are_back(
    redis_client: Redis, cluster_keys: ClusterKeys
) -> None:
    """Redis unreachable (or this daemon stalled) past a lease time: every lease and heartbeat ran out.
    The first daemon back sees itself alone in the live set; sweeping then would take every
    conversation, its peers' too (and keep them: conversations do not move back). It sweeps from its
    next round on, when the others have heartbeat again, and takes only its own share."""
    a, b = node(redis_client, cluster_keys, "a", lease=1.0), node(redis_client, cluster_keys, "b", lease=1.0)
    await a.join()
    await b.join()
    conversations = [f"conversation-{i}" for i in range(12)]
    for conversation in conversations:
        assert (await (a if a.preferred(conversation) else b).claim(conversation)).ok
    await asyncio.sleep(1.3)  # the outage: no renewal, no heartbeat for longer than a lease time
    adopted: list[str] = []

    async def on_lost(conversations: list[str]) -> None:
        return None

    async def on_orphans(conversations: list[str]) -> None:
        adopted.extend(conversations)

    await a._round(on_lost, on_orphans)  # a is back first: b has not said so yet
    assert adopted == []
    await b.registry.heartbeat()
    await a._round(on_lost, on_orphans)
    mine = [c for c in conversations if rendezvous(c, ["a", "b"]) == "a"]
    assert sorted(adopted) == sorted(mine) and 0 < len(mine) < len(conversations)


async def test_new_conversations_spread_over_the_live_daemons(redis_client: Redis, cluster_keys: ClusterKeys) -> None:
    daemons = [node(redis_client, cluster_keys, f"d{i}") for i in range(3)]
    for d in daemons:
        await d.join()
    for d in daemons:
        await d.registry.heartbeat()
    conversations = [f"conversation-{i}" for i in range(300)]
    chosen = [[d.preferred(c) for d in daemons] for c in conversations]
    assert all(sum(row) == 1 for row in chosen)  # every daemon agrees on exactly one
    counts = [sum(row[i] for row in chosen) for i in range(3)]
    assert min(counts) >= 60, counts
    await daemons[2].registry.leave()
    for d in daemons[:2]:
        await d.registry.heartbeat()
    moved = [
        c for c, row in zip(conversations, chosen, strict=True) if not row[2] and daemons[0].preferred(c) != row[0]
    ]
    assert not moved  # only the leaving daemon's conversations move
    assert rendezvous("x", []) is None


async def test_the_rollout_copy_is_appended_once_and_rehydrated(
    redis_client: Redis, cluster_keys: ClusterKeys, tmp_path: Path
) -> None:
    home_a, home_b = tmp_path / "a", tmp_path / "b"
    rollout = home_a / "sessions" / "2026" / "11" / "23" / "rollout-2026-11-23T10-00-00-thread1.jsonl"
    rollout.parent.mkdir(parents=True)
    lines = [b'{"line": 1}\n', b'{"line": 2}\n', b'{"line": 3}\n']
    rollout.write_bytes(b"".join(lines[:2]))
    a = node(redis_client, cluster_keys, "a")
    assert (await a.claim("red")).ok
    token = a.token("red")
    end = len(lines[0])
    await a.mirror.copy_rollout("red", token, thread_id="thread1", codex_home=home_a, rollout=rollout, end=end)
    await a.mirror.copy_rollout("red", token, thread_id="thread1", codex_home=home_a, rollout=rollout, end=end)
    a.mirror.forget("red")  # a stale idea of the copy's length: it is corrected, nothing doubled
    await a.mirror.copy_rollout(
        "red", token, thread_id="thread1", codex_home=home_a, rollout=rollout, end=len(lines[0] + lines[1])
    )
    copy = await a.mirror.load_rollout("red")
    assert copy is not None and copy.data == lines[0] + lines[1] and copy.thread_id == "thread1"
    target = rehydrate(home_b, copy).path
    assert target == home_b / rollout.relative_to(home_a) and target.read_bytes() == lines[0] + lines[1]
    # The same bytes here already: the very file is kept (a Codex process of ours may be appending to
    # it); a file here that lacks some of the copy is replaced, and that is said.
    inode = target.stat().st_ino
    assert not rehydrate(home_b, copy).replaced and target.stat().st_ino == inode
    target.write_bytes(lines[0])
    again = rehydrate(home_b, copy)
    assert again.replaced and target.read_bytes() == lines[0] + lines[1]
    # A local file that is longer and starts with the copy (this daemon's own newer record) is kept.
    target.write_bytes(b"".join(lines))
    assert rehydrate(home_b, copy).path.read_bytes() == b"".join(lines)
    # A copy whose path tries to leave CODEX_HOME lands inside it.
    escaped = rehydrate(home_b, MirroredRollout("t", "../../etc/x.jsonl", b"{}\n")).path
    assert escaped == home_b / "sessions" / "x.jsonl"
    # A new thread replaces the old thread's copy.
    other = home_a / "sessions" / "rollout-thread2.jsonl"
    other.write_bytes(b'{"new": 1}\n')
    await a.mirror.copy_rollout("red", token, thread_id="thread2", codex_home=home_a, rollout=other, end=11)
    copy = await a.mirror.load_rollout("red")
    assert copy is not None and copy.thread_id == "thread2" and copy.data == b'{"new": 1}\n'


async def test_a_previous_owners_report_reaches_only_the_holder_of_the_lease_when_it_is_made(
    redis_client: Redis, cluster_keys: ClusterKeys
) -> None:
    """A report made while nobody holds the lease is the next claimant's. b claimed and waits for a's
    report, then stalls past its lease, and c takes the conversation over and waits too. a's report
    is c's: b, waking, must not take it (it would settle the thought from a's record while c, left
    without it, sends the thought to Codex again)."""
    a, b, c = (node(redis_client, cluster_keys, name, lease=1.0) for name in ("a", "b", "c"))
    await a.mirror.report("red", "sessions/r.jsonl", b"nobody held it\n")  # (e.g. after Redis was frozen)
    assert (await b.claim("red")).ok  # the next claimant gets it
    early = await b.mirror.await_report("red", b.token("red"), "a", 2.0)
    assert early is not None and early.data == b"nobody held it\n"
    stale = asyncio.create_task(b.mirror.await_report("red", b.token("red"), "a", 4.0))
    await asyncio.sleep(1.3)  # b stalls past its lease ...
    assert (await c.claim("red")).ok  # ... and c takes over
    await node(redis_client, cluster_keys, "d").mirror.report("red", "sessions/r.jsonl", b"not the previous owner\n")
    await a.mirror.report("red", "sessions/r.jsonl", b"line 1\nline 2\n")
    report = await c.mirror.await_report("red", c.token("red"), "a", 2.0)
    assert report is not None and report.data == b"line 1\nline 2\n" and report.path == "sessions/r.jsonl"
    assert await stale is None
    assert await c.mirror.await_report("red", c.token("red"), "a", 1.0) is None  # nothing more came


async def test_a_report_made_to_a_holder_that_then_lost_the_lease_is_kept_for_the_next_claimant(
    redis_client: Redis, cluster_keys: ClusterKeys
) -> None:
    """Found in a loaded CI run of test_failover_chaos (a thought reached the model twice): a, killed
    with a thought in flight, restarts and reports its rollout once, to b, the holder then; b stalls
    past its lease before it finishes adopting, and c claims the conversation. The report was b's
    list's alone, so c waited for a record that never came and sent the thought to Codex again. The
    report is also kept under a's name, unconsumed, for whoever claims next."""
    a, b, c = (node(redis_client, cluster_keys, name, lease=1.0) for name in ("a", "b", "c"))
    assert await c.mirror.kept_report("red", "a") is None  # a never reported
    assert (await b.claim("red")).ok
    await a.mirror.report("red", "sessions/r.jsonl", b"line 1\nline 2\n")
    taken = await b.mirror.await_report("red", b.token("red"), "a", 2.0)
    assert taken is not None and taken.data == b"line 1\nline 2\n"  # b took it from its list ...
    await asyncio.sleep(1.3)  # ... and stalls past its lease
    assert (await c.claim("red")).ok
    assert await c.mirror.await_report("red", c.token("red"), "a", 1.0) is None  # nothing for c's token
    kept = await c.mirror.kept_report("red", "a")  # but a's report is kept for c
    assert kept is not None and kept.data == b"line 1\nline 2\n" and kept.path == "sessions/r.jsonl"
    assert await c.mirror.kept_report("red", "b") is None  # (another daemon's name: not a's report)
    await a.mirror.report("red", "sessions/r.jsonl", b"line 1\nline 2\nline 3\n")  # a newer one replaces it
    newer = await c.mirror.kept_report("red", "a")
    assert newer is not None and newer.data.endswith(b"line 3\n")


async def test_a_daemon_whose_renewals_start_late_says_so_once(
    redis_client: Redis, cluster_keys: ClusterKeys, caplog: pytest.LogCaptureFixture
) -> None:
    """A daemon short of CPU (here: its event loop blocked between two rounds, twice) wakes for its
    lease renewals late, and its leases may run out: that is said once, not once per late round. Time
    a round itself spends (waiting for Redis, sweeping) is not lateness."""
    a = node(redis_client, cluster_keys, "a", lease=3.0)  # a round every second
    await a.join()
    await a.leases.note_unclaimed("grey", "")  # (never claimed: every round's sweep offers it, a per-round hook)
    rounds = 0
    enough = asyncio.Event()

    async def on_lost(conversations: list[str]) -> None:
        return None

    async def on_orphans(conversations: list[str]) -> None:
        nonlocal rounds
        rounds += 1
        if rounds in (3, 6):
            # Blocks the loop after this round, while the node waits for the next one: it starts late.
            asyncio.get_running_loop().call_soon(time.sleep, 2.5)
        if rounds == 9:
            enough.set()

    caplog.set_level(logging.DEBUG, logger="coven_codex.cluster.node")
    runner = asyncio.create_task(a.run(on_lost, on_orphans))
    try:
        async with asyncio.timeout(60):
            await enough.wait()
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
    late = [r.getMessage() for r in caplog.records if "renewal started" in r.getMessage()]
    assert len(late) == 1, late
    assert "short of CPU" in late[0] and "lease_time" in late[0], late[0]
    await a.leave()
