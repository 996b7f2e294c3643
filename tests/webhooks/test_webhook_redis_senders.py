"""One webhook sender per target on a Redis journal (a real redis-server): a second is refused naming the
first; in a cluster (``standby``) exactly one of the daemons sends, and another takes over when it stops."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import AsyncIterator

import pytest
from webhook_journal import ENV, SECRET, target, turn, until_saved

from coven_codex.journal.redis import RedisJournal
from coven_codex.support.statelock import StateError
from coven_codex.testing.redis_server import RedisServer
from coven_codex.testing.webhook_receiver import WebhookReceiver
from coven_codex.webhooks.config import ready_targets
from coven_codex.webhooks.sender import TargetSender
from coven_codex.webhooks.service import webhook_senders

pytestmark = pytest.mark.timeout(120)


@contextlib.asynccontextmanager
async def sending(
    name: str, url: str, *, standby: bool = False, hold_ttl: float = 1.0
) -> AsyncIterator[list[TargetSender]]:
    """The senders of one target on a Redis journal handle of their own, as a daemon or the command runs them."""
    journal = RedisJournal.from_url(name)
    try:
        targets = ready_targets([target(url)], ENV)
        if standby:  # (a cluster's daemons)
            async with webhook_senders(journal, targets, default_cwd="/ws", standby=True, hold_ttl=hold_ttl) as senders:
                yield senders
        else:
            async with webhook_senders(journal, targets, default_cwd="/ws") as senders:
                yield senders
    finally:
        await journal.aclose()


async def test_a_second_sender_of_one_target_on_redis_is_refused_naming_the_first(
    redis_server: RedisServer,
) -> None:
    name = redis_server.url(key="webhooks-refused")
    journal = RedisJournal.from_url(name)
    try:
        async with WebhookReceiver(SECRET.encode()) as receiver, sending(name, receiver.url):
            with pytest.raises(StateError) as refused:
                async with sending(name, receiver.url):
                    pass
            message = str(refused.value)
            assert f"another webhook sender (pid {os.getpid()} on {socket.gethostname()}, since" in message
            assert f"is sending to the webhook test of the journal {name}" in message
            ends = [await turn(journal, "red", n) for n in range(10)]
            await receiver.wait_until(lambda r: len(r.acknowledged) >= 10, timeout=60)
            await until_saved(journal, ends[-1])
        # (the first sender gave its hold back at its stop: a new one starts at once)
        async with WebhookReceiver(SECRET.encode()) as second, sending(name, second.url):
            ends.append(await turn(journal, "red", 10))
            await second.wait_until(lambda r: len(r.acknowledged) >= 1, timeout=60)
        assert sorted(r.key for r in receiver.acknowledged) == sorted(e.entry.id or "" for e in ends[:10])
        assert [r.key for r in second.acknowledged] == [ends[10].entry.id]
    finally:
        await journal.aclose()


async def test_in_a_cluster_exactly_one_daemon_sends_and_another_takes_over_when_it_stops(
    redis_server: RedisServer,
) -> None:
    name = redis_server.url(key="webhooks-cluster")
    journal = RedisJournal.from_url(name)
    try:
        async with WebhookReceiver(SECRET.encode()) as receiver, contextlib.AsyncExitStack() as others:
            url = receiver.url
            async with sending(name, url, standby=True, hold_ttl=1.0):  # the first daemon: it takes the hold
                ends = [await turn(journal, "red", 0)]
                await receiver.wait_until(lambda r: len(r.acknowledged) >= 1, timeout=60)
                for _ in range(2):  # two more daemons stand by
                    await others.enter_async_context(sending(name, url, standby=True, hold_ttl=1.0))
                ends += [await turn(journal, "red", n) for n in range(1, 10)]
                await receiver.wait_until(lambda r: len(r.acknowledged) >= 10, timeout=60)
                await until_saved(journal, ends[-1])
            # the sending daemon stopped (it gave its hold back): one of the two others sends from now on
            ends += [await turn(journal, "red", n) for n in range(10, 15)]
            await receiver.wait_until(lambda r: len(r.acknowledged) >= 15, timeout=60)
            await until_saved(journal, ends[-1])
        keys = [r.key for r in receiver.acknowledged]
        assert sorted(keys) == sorted(e.entry.id or "" for e in ends)  # every turn once, none twice
    finally:
        await journal.aclose()
