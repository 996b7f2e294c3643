"""Signs of life on the page, in real headless Chromium over a journal written by the test: while a
turn runs the header shows the time since it started (from its journal entry, so a reload shows
the same), once a second, until the turn ends; an approval answered anywhere shows who decided."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from web_helpers import WebServer, chromium, open_page

from coven_codex.entries import (
    ActivityEntry,
    ApprovalEntry,
    ApprovalRequestEntry,
    ResponseEntry,
    StatusEntry,
    ToolCallEntry,
    ToolResultEntry,
)
from coven_codex.journal import FileJournal, JournalRecord

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
        assert await page.locator(".msg.approval_request button:disabled").count() == 3
        assert errors == []
    await journal.aclose()


async def test_approve_for_session_is_a_button_that_answers_for_the_session_and_says_so(
    web_server: WebServer, tmp_path: Path, chromium_path: str
) -> None:
    journal = FileJournal(web_server.journal, durability="never")
    await journal.append(ApprovalRequestEntry(conversation="room", request_id="req-2", action="pytest -q"))
    url = await web_server.start()
    errors: list[str] = []
    async with chromium(tmp_path / "profile") as browser:
        page = await open_page(browser, url + "#c=room", errors)
        await page.click(".msg.approval_request button.approve-session:not([disabled])")
        await page.wait_for_selector(".msg.approval_request .answer")
        assert (await page.inner_text(".msg.approval_request .answer")).startswith("approved for the session by ")
        assert await page.locator(".msg.approval_request button:disabled").count() == 3
        assert errors == []
    answers = [i.entry for i in await journal.read() if isinstance(i, JournalRecord) and i.entry.kind == "approval"]
    await journal.aclose()
    assert [(a.request_id, getattr(a, "decision", None)) for a in answers] == [("req-2", "approve_for_session")]


async def test_a_turn_of_thirty_tool_calls_is_one_folded_group_of_steps_then_the_reply(
    web_server: WebServer, tmp_path: Path, chromium_path: str
) -> None:
    journal = FileJournal(web_server.journal, durability="never")
    url = await web_server.start()
    errors: list[str] = []
    async with chromium(tmp_path / "profile") as browser:
        page = await open_page(browser, url + "#c=room", errors)
        await journal.append(ActivityEntry(conversation="room", activity="plan", text="1. add\n2. report"))
        for n in range(30):
            call = ToolCallEntry(conversation="room", tool="coven.add", arguments={"a": n, "b": 1}, call_id=f"c{n}")
            await journal.append(call)
            await journal.append(
                ToolResultEntry(conversation="room", tool="coven.add", call_id=f"c{n}", text=str(n + 1))
            )
        await journal.append(ResponseEntry(conversation="room", text="thirty additions done."))
        await page.wait_for_selector(".msg.response:has-text('thirty additions done.')")
        kinds = await page.evaluate("[...document.getElementById('messages').children].map(n => n.className)")
        assert kinds == ["msg steps", "msg response"], kinds  # not 61 bubbles
        summary = await page.inner_text(".msg.steps > summary")
        assert summary.startswith("31 steps · ") and "a=29" in summary, summary
        await page.click(".msg.steps > summary")  # opened: every call and result
        assert await page.locator(".msg.steps .msg.tool_result:visible").count() == 30
        assert errors == []
    await journal.aclose()


async def test_a_result_that_comes_after_its_approval_request_gets_a_group_that_says_so(
    web_server: WebServer, tmp_path: Path, chromium_path: str
) -> None:
    journal = FileJournal(web_server.journal, durability="never")
    await journal.append(ToolCallEntry(conversation="room", tool="exec_command", arguments={"cmd": "ls"}, call_id="k"))
    await journal.append(ApprovalRequestEntry(conversation="room", request_id="req-3", action="ls"))
    await journal.append(ToolResultEntry(conversation="room", tool="exec_command", call_id="k", text="a.txt\nb.txt"))
    url = await web_server.start()
    errors: list[str] = []
    async with chromium(tmp_path / "profile") as browser:
        page = await open_page(browser, url + "#c=room", errors)
        await page.wait_for_selector(".msg.steps:last-child > summary")
        summaries = await page.locator(".msg.steps > summary").all_inner_texts()
        assert summaries == ['1 step · → exec_command(cmd="ls")', "1 result · ← a.txt"], summaries
        assert errors == []
    await journal.aclose()
