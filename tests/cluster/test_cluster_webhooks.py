"""``[webhooks] in_daemon = true`` in a cluster: real daemons (Codex 0.169.0, the scripted model) on one
Redis journal, a real receiver; exactly one daemon sends each turn, and another takes over when it stops."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cluster_harness import ClusterHarness

from coven_codex.entries import BaseEntry, StatusEntry
from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.redis_server import RedisServer
from coven_codex.testing.responders import echo_responder
from coven_codex.testing.webhook_receiver import WebhookReceiver

pytestmark = [pytest.mark.codex, pytest.mark.timeout(300)]

SECRET = "cluster-webhook-secret-0123456789abcdef"


@pytest.fixture
async def model() -> AsyncIterator[ScriptedModelServer]:
    async with ScriptedModelServer(responder=echo_responder) as server:
        yield server


def turn_ends(entries: list[BaseEntry]) -> list[str]:
    return [e.id or "" for e in entries if isinstance(e, StatusEntry) and e.state in ("turn_completed", "turn_failed")]


async def test_in_a_cluster_with_in_daemon_webhooks_exactly_one_daemon_sends_each_turn(
    tmp_path: Path,
    codex_bin_169: Path,
    model: ScriptedModelServer,
    redis_server: RedisServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TEST_WEBHOOK_SECRET", SECRET)
    async with WebhookReceiver(SECRET.encode()) as receiver:
        config = tmp_path / "coven.toml"
        config.write_text(
            "[webhooks]\nin_daemon = true\n[[webhooks.targets]]\n"
            f'url = "{receiver.url}"\nname = "ci"\nsecret_env = "TEST_WEBHOOK_SECRET"\n'
            'timeout = 2\nmax_delay = 2\nstart = "beginning"\n'
        )
        h = ClusterHarness(tmp_path, codex_bin_169, model, redis_server, nodes=3, lease=2.0)
        h.extra_args = ["--config", str(config)]
        try:
            for node in h.nodes:
                await h.start(node)
            for node in h.nodes:
                await h.until_ready(node)
            conversations = [f"conversation-{i}" for i in range(4)]
            for turn in range(2):
                for conversation in conversations:
                    await h.think(conversation, f"{conversation} turn {turn}")
            entries = await h.wait_for(
                lambda es: len(turn_ends(es)) >= 8, timeout=180, what="eight turn ends", while_progressing=True
            )
            await receiver.wait_until(lambda r: {q.key for q in r.acknowledged} >= set(turn_ends(entries)), timeout=60)
            # the sending daemon is one of the three: stop them one by one, the turns keep coming once each
            assert await h.stop(h.nodes[0]) == 0
            assert await h.stop(h.nodes[1]) == 0
            for conversation in conversations:
                await h.think(conversation, f"{conversation} turn 2")
            entries = await h.wait_for(
                lambda es: len(turn_ends(es)) >= 12, timeout=180, what="twelve turn ends", while_progressing=True
            )
            await receiver.wait_until(lambda r: {q.key for q in r.acknowledged} >= set(turn_ends(entries)), timeout=60)
            assert await h.stop(h.nodes[2]) == 0
        finally:
            left = await h.cleanup()
        assert not left, left
    sent = Counter(r.key for r in receiver.received)
    twice = {key: n for key, n in sent.items() if n > 1}
    assert not twice, f"turns sent more than once: {twice}"
    assert set(sent) == set(turn_ends(entries))
