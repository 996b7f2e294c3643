"""End to end: ``/metrics``, ``/healthz`` and ``/readyz`` of ``coven-codex run --metrics-port 0`` with the
real Codex CLI and the scripted model server (docs/operations.md, Metrics and health)."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_harness import AgentHarness, replies

from coven_codex.entries import BaseEntry, ErrorEntry
from coven_codex.metrics.scrape import get, samples, total, value
from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.redis_server import RedisServer
from coven_codex.testing.responders import echo_responder
from coven_codex.testing.steps import CallTool, HttpError, Reply
from coven_codex.testing.webhook_receiver import WebhookReceiver
from coven_codex.webhooks.sender import REPORT_AFTER_FAILURES

pytestmark = [pytest.mark.codex, pytest.mark.timeout(240)]

Factory = Callable[..., AgentHarness]
SPELLS_MODULE = '''
def shout(text: str) -> str:
    """Upper-case the text."""
    return text.upper() + "!"
'''


async def metrics_url(h: AgentHarness) -> str:
    log = await h.until_logged("metrics and health probes on ")
    found = re.search(r"metrics and health probes on (http://[0-9.]+:\d+)", log)
    assert found, log[-2000:]
    return found.group(1)


async def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, text = await get(url, "/metrics")
    assert status == 200, text
    return samples(text)


def kinds(entries: list[BaseEntry], kind: str, state: str | None = None) -> int:
    return sum(1 for e in entries if e.kind == kind and (state is None or getattr(e, "state", None) == state))


async def test_metrics_move_as_the_run_did(codex_bin_169: Path, harness_factory: Factory) -> None:
    # thought 1: a spell call, then a reply; thought 2: the model refuses the key (an AUTH error);
    # thought 3: echoed
    script = [CallTool("coven.shout", {"text": "hello"}), Reply("spell done"), HttpError(401, "Incorrect API key")]
    async with ScriptedModelServer(script, responder=echo_responder) as server:
        h = harness_factory(codex_bin_169, server)
        (h.tmp / "agent_test_spells.py").write_text(SPELLS_MODULE)
        daemon = await h.start("--spells", "agent_test_spells:shout", "--metrics-port", "0")
        url = await metrics_url(h)
        await h.until_logged("ready (pid")
        before = await scrape(url)
        assert value(before, "coven_thoughts_received_total") == 0
        assert value(before, "coven_turns_started_total") == 0

        await h.think("c", "shout hello")
        await h.wait_for(lambda es: "spell done" in replies(es, "c"), what="the reply after the spell")
        await h.wait_for(lambda es: kinds(es, "status", "turn_completed") >= 1, what="the first turn's end")
        first = await scrape(url)
        assert value(first, "coven_thoughts_received_total") == 1
        assert value(first, "coven_thoughts_handed_over_total") == 1
        assert value(first, "coven_turns_started_total") == 1
        assert value(first, "coven_turns_ended_total", status="turn_completed") == 1
        assert value(first, "coven_spell_calls_total", spell="shout", outcome="ok") == 1
        assert value(first, "coven_spell_call_duration_seconds_count", spell="shout") == 1
        assert value(first, "coven_thought_to_turn_started_seconds_count") == 1
        assert value(first, "coven_thought_to_first_reply_seconds_count") == 1
        assert value(first, "coven_conversations_live") == 1
        assert value(first, "coven_codex_processes") >= 1

        await h.think("c", "this one fails")
        await h.wait_for(lambda es: any(isinstance(e, ErrorEntry) for e in es), what="the AUTH error")
        await h.think("c", "after the error")
        await h.wait_for(lambda es: "echo: after the error" in replies(es, "c"), what="the reply after the error")
        await h.wait_for(lambda es: kinds(es, "status", "turn_completed") >= 2, what="the third turn's end")
        entries = await h.entries()
        last = await scrape(url)
        assert value(last, "coven_thoughts_received_total") == 3
        assert value(last, "coven_errors_total", code="AUTH") == 1
        # every counter moved as the journal shows the run did
        assert value(last, "coven_replies_total") == kinds(entries, "response")
        assert value(last, "coven_turns_started_total") == kinds(entries, "status", "turn_started")
        assert total(last, "coven_errors_total") == kinds(entries, "error")
        ended = sum(1 for e in entries if e.kind == "status" and getattr(e, "state", "").startswith("turn_"))
        assert total(last, "coven_turns_ended_total") == ended - kinds(entries, "status", "turn_started")
        assert value(last, "coven_spell_calls_total", spell="shout", outcome="ok") == 1
        # egress (rollout -> journal) is a reader too: every line of the settled turns is translated
        assert ("coven_journal_lag_entries", (("reader", "egress"),)) in last
        assert value(last, "coven_journal_lag_seconds", reader="egress") >= 0
        # conversation names are never label values
        assert not any(("conversation", "c") in labels for _, labels in last)

        status, text = await get(url, "/healthz")
        assert status == 200 and text.startswith("ok: event loop lag"), text
        status, text = await get(url, "/readyz")
        assert status == 200 and text == "ready: journal, codex, daemon\n", text
        assert await h.stop(daemon) == 0


async def until_ready(url: str, expected: int, *, timeout: float = 30.0) -> str:
    """Poll ``/readyz`` (a probe's way) until it answers ``expected``; its body."""
    deadline = time.monotonic() + timeout
    while True:
        status, text = await get(url, "/readyz")
        if status == expected:
            return text
        if time.monotonic() > deadline:
            raise AssertionError(f"/readyz stayed {status} ({text!r}), expected {expected}")
        await asyncio.sleep(0.2)


async def test_readyz_follows_the_journals_redis(
    codex_bin_169: Path, model_server: ScriptedModelServer, harness_factory: Factory, tmp_path: Path
) -> None:
    with RedisServer(tmp_path / "redis", extra_args=("--appendfsync", "always")) as redis:
        h = harness_factory(codex_bin_169, model_server, redis.url(key="chat"))
        daemon = await h.start("--metrics-port", "0")
        url = await metrics_url(h)
        await h.until_logged("ready (pid")
        await until_ready(url, 200)
        redis.stop()
        text = await until_ready(url, 503)
        assert text.startswith("not ready\njournal: the journal "), text
        status, health = await get(url, "/healthz")  # alive all along: only readiness depends on Redis
        assert status == 200, health
        redis.start()
        await until_ready(url, 200)
        page = await scrape(url)
        assert value(page, "coven_journal_outages_total") == 1
        assert value(page, "coven_journal_reachable") == 1
        await h.think("c", "after the outage")
        await h.wait_for(lambda es: "echo: after the outage" in replies(es, "c"), what="a reply after the outage")
        assert await h.stop(daemon) == 0


async def test_a_webhook_targets_journal_lag_grows_while_it_refuses_and_ends_when_it_accepts(
    codex_bin_169: Path,
    model_server: ScriptedModelServer,
    harness_factory: Factory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = "metrics-webhook-secret-0123456789abcdef"
    monkeypatch.setenv("TEST_WEBHOOK_SECRET", secret)
    async with WebhookReceiver(secret.encode(), default=500) as receiver:
        config = tmp_path / "coven.toml"
        config.write_text(
            "[webhooks]\nin_daemon = true\n[[webhooks.targets]]\n"
            f'url = "{receiver.url}"\nname = "ops"\nsecret_env = "TEST_WEBHOOK_SECRET"\n'
            'timeout = 1\nmax_delay = 1\nstart = "beginning"\n'
        )
        h = harness_factory(codex_bin_169, model_server)
        daemon = await h.start("--config", str(config), "--metrics-port", "0")
        url = await metrics_url(h)
        await h.until_logged("ready (pid")
        await h.think("c", "hello")
        await h.wait_for(lambda es: kinds(es, "status", "turn_completed") >= 1, what="the turn's end")
        # Refused past REPORT_AFTER_FAILURES: the sender reports the outage in the chat, an entry after the
        # turn end it has yet to deliver. That report is not owed to the target: once the turn end is
        # acknowledged the lag is 0 (it counted the report, and stayed at 1, before).
        await receiver.wait_until(lambda r: len(r.received) >= REPORT_AFTER_FAILURES + 1, timeout=60)
        await h.wait_for(
            lambda es: any(isinstance(e, ErrorEntry) and e.code == "WEBHOOK_FAILING" for e in es),
            what="the target's failure report",
        )
        lagging = await scrape(url)
        assert value(lagging, "coven_journal_lag_entries", reader="webhook ops") >= 1
        assert value(lagging, "coven_journal_lag_seconds", reader="webhook ops") > 0
        receiver.default = 200
        await receiver.wait_until(lambda r: len(r.acknowledged) >= 1, timeout=60)
        deadline = time.monotonic() + 30
        while value(await scrape(url), "coven_journal_lag_entries", reader="webhook ops") != 0:
            assert time.monotonic() < deadline, "the webhook target's lag never came back to 0"
            await asyncio.sleep(0.2)  # (its cursor is saved by the sender, after the acknowledgement)
        assert await h.stop(daemon) == 0
