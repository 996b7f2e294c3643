"""``/history`` and ``/list`` typed in the page's composer, in real headless Chromium at desktop (1280 by 800)
and phone (390 by 844) size: the answer is one notice, a line per thought and per reply, inside the
viewport's width (a long address in a thought included), and the conversation goes on under it.

Set ``COVEN_WEB_SCREENSHOTS=docs/images`` to write the screenshots used in the docs
(``web-history-desktop.png``, ``web-history-phone.png``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import Page
from test_web_layout import DESKTOP, LONG_URL, OVERFLOW, PHONE, shot
from web_helpers import WebServer, chromium, open_page

from coven_codex.entries import ResponseEntry, ThoughtEntry
from coven_codex.journal import FileJournal, JournalRecord

pytestmark = pytest.mark.timeout(180)

ROOM = "release-notes"
QUESTIONS = (
    (
        "Which tests failed in last night's build?",
        "Two: `test_round_trip` and `test_parse_nested`, both in the parser.",
    ),
    (f"Why does the round trip fail? The log is at {LONG_URL}", "A fixture lost its `children` key in a1b2c3d."),
    ("Fix it and run the suite again.", "Fixed the fixture; the suite passes: 1,204 passed in 41 s."),
)


async def _send(page: Page, journal: FileJournal, question: str, reply: str) -> None:
    """Type ``question`` in the composer; the daemon's part (the reply to it) is appended by the test."""
    await page.fill("#input", question)
    await page.press("#input", "Enter")
    await page.wait_for_function(
        "(text) => [...document.querySelectorAll('.msg.thought')].some(n => n.textContent.includes(text))",
        arg=question[:30],
    )
    thought = next(
        item.entry
        for item in reversed(await journal.read())
        if isinstance(item, JournalRecord) and isinstance(item.entry, ThoughtEntry) and item.entry.text == question
    )
    await journal.append(ResponseEntry(conversation=ROOM, text=reply, in_reply_to=thought.id))
    await page.wait_for_function(
        "(text) => [...document.querySelectorAll('.msg.response')].some(n => n.textContent.includes(text))",
        arg=reply.replace("`", "")[-15:],  # as shown: the backticks are code
    )


async def _answer(page: Page, command: str, starts: str) -> str:
    await page.fill("#input", command)
    await page.press("#input", "Enter")
    await page.wait_for_function(
        "(starts) => { const n = document.getElementById('notice');"
        " return !n.hidden && n.textContent.startsWith(starts); }",
        arg=starts,
    )
    text: str = await page.inner_text("#notice")
    return text


async def test_history_and_list_answer_in_the_page_at_desktop_and_phone_size(
    web_server: WebServer, tmp_path: Path, chromium_path: str
) -> None:
    journal = FileJournal(web_server.journal, durability="never")
    await journal.append(ThoughtEntry(conversation="someone else's", sender="ada", text="not mine"))
    url = await web_server.start()
    errors: list[str] = []
    async with chromium(tmp_path / "profile") as browser:
        page = await open_page(browser, url + f"#c={ROOM}", errors)
        await page.set_viewport_size(DESKTOP)
        for question, reply in QUESTIONS:
            await _send(page, journal, question, reply)

        history = await _answer(page, "/history 3", "the last 3 exchanges here")
        lines = history.splitlines()
        assert len(lines) == 7 and lines[1].endswith("tester: Which tests failed in last night's build?"), lines
        assert lines[2] == "  → codex: Two: `test_round_trip` and `test_parse_nested`, both in the parser.", lines
        assert lines[6] == "  → codex: Fixed the fixture; the suite passes: 1,204 passed in 41 s.", lines
        box = await page.locator("#notice").bounding_box()
        assert box is not None and box["height"] > 7 * 14, box  # a line each, not one run-on line
        assert await page.evaluate(OVERFLOW) == []
        await shot(page, "web-history-desktop", tmp_path)

        await page.set_viewport_size(PHONE)
        await page.evaluate("() => { const m = document.getElementById('messages'); m.scrollTop = m.scrollHeight; }")
        assert await page.evaluate(OVERFLOW) == []
        await shot(page, "web-history-phone", tmp_path)

        listed = await _answer(page, "/list", "your conversations")
        assert f"· {ROOM} · codex: Fixed the fixture" in listed and "someone else" not in listed, listed
        assert await page.evaluate(OVERFLOW) == []
        assert errors == []
    await journal.aclose()
