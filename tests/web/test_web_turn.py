"""Signs of life on the page, in real headless Chromium over a journal written by the test: while a
turn runs the header shows the time since it started (from its journal entry, so a reload shows
the same), once a second, until the turn ends; an approval answered anywhere shows who decided."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from web_helpers import WebServer, chromium, open_page

from coven_codex.entries import ApprovalEntry, ApprovalRequestEntry, StatusEntry
from coven_codex.journal import FileJournal

pytestmark = pytest.mark.timeout(180)

TURN_TEXT = "() => document.getElementById('turn').textContent"
ELAPSED = re.compile(r"^Codex is working… (\d+):(\d\d)$")


def seconds(text: str) -> int:
    match = ELAPSED.match(text)
    assert match, text
    return int(match.group(1)) * 60 + int(match.group(2))


async def test_a_running_turn_shows_its_elapsed_time_until_it_ends(
    web_server: WebServer, tmp_path: Path, chromium_path: str
) -> None:
    journal = FileJournal(web_server.journal, durability="never")
    started = datetime.now(UTC) - timedelta(seconds=75)
    await journal.append(StatusEntry(conversation="room", state="turn_started", ts=started))
    url = await web_server.start()
    errors: list[str] = []
    async with chromium(tmp_path / "profile") as browser:
        page = await open_page(browser, url + "#c=room", errors)
        await page.wait_for_function(f"() => /working… \\d+:\\d\\d$/.test(({TURN_TEXT})())")
        first = await page.evaluate(TURN_TEXT)
        assert 75 <= seconds(first) < 75 + 60, first  # counted from the turn's start, not the page's load
        await page.wait_for_function(f"t => ({TURN_TEXT})() !== t", arg=first)  # it ticks by itself
        assert seconds(await page.evaluate(TURN_TEXT)) > seconds(first)
        await page.reload()
        await page.wait_for_function(f"() => /working… \\d+:\\d\\d$/.test(({TURN_TEXT})())")
        assert seconds(await page.evaluate(TURN_TEXT)) >= 75
        await journal.append(StatusEntry(conversation="room", state="turn_completed"))
        await page.wait_for_function(f"() => ({TURN_TEXT})() === ''")
        assert await page.evaluate("document.getElementById('stop').disabled")
        assert errors == []
    await journal.aclose()


async def test_an_approval_answered_elsewhere_disables_the_buttons_and_says_who_decided(
    web_server: WebServer, tmp_path: Path, chromium_path: str
) -> None:
    journal = FileJournal(web_server.journal, durability="never")
    await journal.append(ApprovalRequestEntry(conversation="room", request_id="req-1", action="rm -rf build"))
    url = await web_server.start()
    errors: list[str] = []
    async with chromium(tmp_path / "profile") as browser:
        page = await open_page(browser, url + "#c=room", errors)
        await page.wait_for_selector(".msg.approval_request button.approve:not([disabled])")
        await journal.append(ApprovalEntry(conversation="room", sender="bob", request_id="req-1", decision="deny"))
        await page.wait_for_selector(".msg.approval_request .answer")
        assert await page.inner_text(".msg.approval_request .answer") == "denied by bob"
        assert await page.locator(".msg.approval_request button:disabled").count() == 2
        assert errors == []
    await journal.aclose()
