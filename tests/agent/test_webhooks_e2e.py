"""Turn-complete webhooks sent by the daemon itself (``[webhooks] in_daemon``), end to end: the real
daemon, the real Codex 0.169.0, the scripted model, a real receiver that fails in every way it can;
the daemon is killed with SIGKILL while it retries."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from agent_harness import AgentHarness

from coven_codex.entries import BaseEntry, ErrorEntry, StatusEntry, ThoughtEntry
from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.webhook_receiver import HANG, WebhookReceiver

pytestmark = [pytest.mark.codex, pytest.mark.timeout(300)]

Factory = Callable[[Path, ScriptedModelServer], AgentHarness]
SECRET = "e2e-webhook-secret-0123456789abcdef"


def turn_ends(entries: list[BaseEntry]) -> list[StatusEntry]:
    return [e for e in entries if isinstance(e, StatusEntry) and e.state in ("turn_completed", "turn_failed")]


async def test_webhooks_survive_500_429_a_hang_and_kill_9_of_the_daemon(
    codex_bin_169: Path,
    model_server: ScriptedModelServer,
    harness_factory: Factory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TEST_WEBHOOK_SECRET", SECRET)
    answers = [500, (429, {"Retry-After": "1"}), HANG]
    async with WebhookReceiver(SECRET.encode(), answers=answers, default=500) as receiver:
        config = tmp_path / "coven.toml"
        config.write_text(
            "[webhooks]\nin_daemon = true\n[[webhooks.targets]]\n"
            f'url = "{receiver.url}"\nname = "e2e"\nsecret_env = "TEST_WEBHOOK_SECRET"\n'
            'timeout = 1\nmax_delay = 2\nstart = "beginning"\n'
        )
        h = harness_factory(codex_bin_169, model_server)
        daemon = await h.start("--config", str(config))
        await h.until_logged("sending turn-complete webhooks to 1 target(s)")
        for conversation, text in (("alpha", "alpha one"), ("beta", "beta one"), ("alpha", "alpha two")):
            await h.think(conversation, text)
        await h.wait_for(lambda es: len(turn_ends(es)) >= 3, timeout=120, what="three turn ends")
        # The first turn is refused with 500, 429 (Retry-After), no answer, then 500s: kill -9 mid-retry.
        await receiver.wait_until(lambda r: len(r.received) >= 5, timeout=120)
        await h.kill9(daemon)
        assert receiver.acknowledged == []
        receiver.default = 200
        await h.think("beta", "beta two")  # while no daemon runs
        daemon = await h.start("--config", str(config))
        await h.wait_for(lambda es: len(turn_ends(es)) >= 4, timeout=120, what="four turn ends")
        entries = await h.entries()
        expected = [e.id for e in turn_ends(entries)]
        await receiver.wait_until(lambda r: {q.key for q in r.acknowledged} >= set(expected), timeout=120)
        assert await h.stop(daemon) == 0
    entries = await h.entries()
    ends = turn_ends(entries)
    # Every turn delivered at least once, under one key per turn, in journal order (so per conversation).
    acked: list[str] = []
    for request in receiver.acknowledged:
        if request.key not in acked:
            acked.append(request.key)
    assert acked == [e.id for e in ends]
    assert {request.key for request in receiver.received} == set(acked)
    assert all(request.signature_ok for request in receiver.received)
    thoughts = {e.id: e.text for e in entries if isinstance(e, ThoughtEntry)}
    for request in receiver.acknowledged:
        payload = request.payload()
        end = next(e for e in ends if e.id == request.key)
        assert payload["idempotency-key"] == payload["entry-id"] == end.id
        assert payload["thread-id"] == end.thread_id and payload["conversation"] == end.conversation
        assert payload["status"] == "completed" and payload["cwd"] == str(h.workspace.resolve())
        assert payload["input-messages"] == [thoughts[end.in_reply_to or ""]]
        assert payload["last-assistant-message"] == f"echo: {thoughts[end.in_reply_to or '']}"
    # The outage reached the chat once, not once per retry, and not again after the restart.
    reports = [e for e in entries if isinstance(e, ErrorEntry) and e.code.startswith("WEBHOOK_")]
    assert [(e.code, e.in_reply_to) for e in reports] == [("WEBHOOK_FAILING", ends[0].in_reply_to)]
