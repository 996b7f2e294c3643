"""``coven-codex web --metrics-port``: the page's own /metrics, /healthz and /readyz, as Slack's and Discord's
(docs/operations.md, Metrics and health), on the real page server subprocess."""

from __future__ import annotations

import asyncio
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from web_helpers import WebServer, live

from coven_codex.entries import ResponseEntry, ThoughtEntry
from coven_codex.journal import FileJournal
from coven_codex.metrics.scrape import get, samples, value

pytestmark = pytest.mark.timeout(120)

METRICS_LINE = re.compile(r"open (http://\S+)/metrics")


async def metrics_url(server: WebServer) -> str:
    """The metrics URL the page server printed after its page's."""
    assert server.process is not None and server.process.stdout is not None
    line = (await asyncio.wait_for(server.process.stdout.readline(), 30)).decode()
    match = METRICS_LINE.search(line)
    assert match, f"no metrics URL printed: {line!r}\n{server.log()}"
    return match.group(1)


async def test_the_page_serves_its_metrics_and_probes_with_its_journal_lag(web_server: WebServer) -> None:
    journal = FileJournal(web_server.journal, durability="never")
    await journal.append(ThoughtEntry(conversation="room", sender="ada", text="earlier question"))
    await journal.append(ResponseEntry(conversation="room", text="earlier answer"))
    await web_server.start("--metrics-port", "0")
    base = await metrics_url(web_server)
    async with live(web_server) as (_socket, hello):  # the page is served: its hub follows the journal
        assert hello["type"] == "hello"
        status, ready = await get(base, "/readyz")
        assert status == 200 and "journal" in ready and "platform" in ready, ready
        status, healthy = await get(base, "/healthz")
        assert status == 200 and healthy.startswith("ok"), healthy
        status, text = await get(base, "/metrics")
        assert status == 200
        page = samples(text)
        assert value(page, "coven_platform_connected") == 1
        assert value(page, "coven_journal_reachable") == 1
        assert ("coven_journal_lag_entries", (("reader", "adapter"),)) in page
        assert value(page, "coven_journal_lag_entries", reader="adapter") == 0
        assert value(page, "coven_journal_lag_seconds", reader="adapter") == 0
    await journal.aclose()
    assert await web_server.stop() == 0


def run_web(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coven_codex", "web", "--port", "0", *args],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def test_a_bad_or_taken_metrics_port_is_refused_saying_what_to_do(tmp_path: Path) -> None:
    journal = str(tmp_path / "j.jsonl")
    result = run_web("--journal", journal, "--metrics-port", "70000")
    assert result.returncode == 2 and "--metrics-port must be between 0 and 65535" in result.stderr
    result = run_web("--journal", journal, "--metrics-port", "0", "--metrics-allow", "the office")
    assert result.returncode == 2 and "'the office' is not a network" in result.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = run_web("--journal", journal, "--metrics-port", str(port))
    assert result.returncode == 2 and f"cannot serve metrics on 127.0.0.1:{port}" in result.stderr, result.stderr
    assert "pick another metrics_port" in result.stderr and "Traceback" not in result.stderr
