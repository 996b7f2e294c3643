"""An adapter process's metrics port: ``coven-codex slack`` (the real process, against the fake Slack)
with ``metrics_port`` in its section: ready once connected and following the journal, platform
answers counted by class (a rate limit, then the retry), the ledger and the journal lag."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from slack_under_test import SlackAdapter

from coven_codex.entries import ResponseEntry
from coven_codex.journal import FileJournal
from coven_codex.metrics.scrape import get, samples, value


async def test_a_slack_adapter_serves_its_metrics_and_readiness(tmp_path: Path) -> None:
    slack = SlackAdapter(tmp_path, extra_config="metrics_port = 0\n", rate_limit_every=2)
    await slack.start()
    try:
        found = re.search(r"metrics and health probes on (http://[0-9.]+:\d+)", slack.stderr.read_text())
        assert found, slack.stderr.read_text()
        url = found.group(1)
        status, text = await get(url, "/readyz")
        assert (status, text) == (200, "ready: journal, platform\n")
        conversation = slack.conversation("general", "ann")
        journal = FileJournal(slack.journal, durability="never")
        try:
            for number in range(3):
                await journal.append(ResponseEntry(conversation=conversation, text=f"answer {number}", id=f"r{number}"))
        finally:
            await journal.aclose()
        async with asyncio.timeout(30):
            while True:
                screen = "\n".join(m.text for m in await slack.messages())
                if all(f"answer {n}" in screen for n in range(3)):
                    break
                await asyncio.sleep(0.1)
        status, text = await get(url, "/metrics")
        assert status == 200
        page = samples(text)
        assert value(page, "coven_platform_answers_total", answer_class="rate_limited") >= 1
        assert value(page, "coven_platform_answers_total", answer_class="retried") >= 1
        assert value(page, "coven_platform_answers_total", answer_class="ok") >= 1
        assert value(page, "coven_ledger_intents_pending") == 0
        assert value(page, "coven_platform_connected") == 1
        assert value(page, "coven_journal_reachable") == 1
        assert ("coven_journal_lag_entries", (("reader", "adapter"),)) in page
        assert value(page, "coven_thoughts_received_total") == 0  # a daemon's family, not fed here
    finally:
        await slack.close()
