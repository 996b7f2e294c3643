"""The page's layout in real headless Chromium at desktop (1280 by 800) and phone (390 by 844) size,
over a journal written by the test: nothing overflows horizontally at 390 px (long words and
addresses, a wide code block, a wide table, a large image, an approval with a long command), the
composer, the approval buttons and the conversations menu are usable there.

Set ``COVEN_WEB_SCREENSHOTS=docs/images`` to write the screenshots used in the docs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from playwright.async_api import Page
from web_helpers import WebServer, chromium, open_page, png

from coven_codex.entries import (
    ApprovalRequestEntry,
    ResponseEntry,
    StatusEntry,
    ThoughtEntry,
    ToolCallEntry,
    ToolResultEntry,
)
from coven_codex.journal import FileJournal

pytestmark = pytest.mark.timeout(180)

DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
LONG_URL = "https://example.com/builds/" + "very-long-path-segment-" * 8 + "end"
REPLY = f"""Two tests fail after the change to the parser:

| test | file | line | error | since |
|---|---|---|---|---|
| `test_parse_nested_lists_with_unicode_names` | tests/test_parser_nested.py | 212 | AssertionError | a1b2c3d |
| `test_round_trip_of_every_fixture_file` | tests/test_round_trip.py | 48 | KeyError: 'children' | a1b2c3d |

```python
def parse(text: str) -> Node:  # the line that changed: {"x" * 70}
    return Parser(text, strict=True, keep_comments=True, unicode_names=True).parse_document()
```

See the full log at {LONG_URL}."""

# Everything that must stay inside the viewport's width (scrollable blocks may scroll inside).
OVERFLOW = """() => {
  const width = document.documentElement.clientWidth;
  const out = [];
  if (document.documentElement.scrollWidth > width) out.push(`document ${document.documentElement.scrollWidth}`);
  const box = document.getElementById('messages');
  if (box.scrollWidth > box.clientWidth) out.push(`#messages scrolls sideways: ${box.scrollWidth}`);
  const selector = 'header, header *, #composer, #composer *, .msg, .msg .who, .msg .body, .msg > pre, '
    + '.msg .body > pre, .msg .table, .msg img, .msg .buttons button, #notice';
  for (const node of document.querySelectorAll(selector)) {
    const rect = node.getBoundingClientRect();
    if (rect.width === 0) continue;
    if (rect.left < -0.5 || rect.right > width + 0.5) {
      out.push(`${node.tagName}.${node.className} ${rect.left}..${rect.right}`);
    }
  }
  return out;
}"""


async def shot(page: Page, name: str, tmp_path: Path) -> None:
    folder = Path(os.environ.get("COVEN_WEB_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(folder / f"{name}.png"))


async def a_busy_conversation(page: Page, journal: FileJournal, tmp_path: Path) -> None:
    """A thought with an image (uploaded by the page), a turn with a tool call, a wide reply and an
    approval request still waiting."""
    image = tmp_path / "screenshot.png"
    image.write_bytes(png(900, 500))
    await page.set_input_files("#file", str(image))
    await page.wait_for_selector("#attachments img")
    await page.fill("#input", f"Why does the build fail? {LONG_URL}")
    await page.click("#send")
    await page.wait_for_selector(".msg.thought img.attachment")
    room = "layout"
    for entry in (
        StatusEntry(conversation=room, state="turn_started"),
        ToolCallEntry(conversation=room, tool="exec_command", arguments={"cmd": "pytest -q tests/ -x " + "-k x " * 20}),
        ToolResultEntry(conversation=room, tool="exec_command", text="FAILED " + "tests/test_parser.py::" * 6 + "x"),
        ResponseEntry(conversation=room, text=REPLY),
        ApprovalRequestEntry(
            conversation=room, request_id="req-1", action="git push --force-with-lease origin " + "feature/" * 8 + "x"
        ),
    ):
        await journal.append(entry)
    await page.wait_for_selector(".msg.approval_request button.approve")
    await page.wait_for_function("() => [...document.images].every(i => i.complete && i.naturalWidth > 0)")


async def test_the_page_fits_a_phone_at_390_px_and_a_desktop(
    web_server: WebServer, tmp_path: Path, chromium_path: str
) -> None:
    journal = FileJournal(web_server.journal, durability="never")
    await journal.append(ThoughtEntry(conversation="another conversation", sender="ada", text="hello"))
    url = await web_server.start()
    errors: list[str] = []
    async with chromium(tmp_path / "profile") as browser:
        page = await open_page(browser, url + "#c=layout", errors)
        await page.set_viewport_size(DESKTOP)
        await a_busy_conversation(page, journal, tmp_path)
        assert await page.evaluate(OVERFLOW) == []
        await shot(page, "web-desktop", tmp_path)

        await page.set_viewport_size(PHONE)
        await page.evaluate("() => { const m = document.getElementById('messages'); m.scrollTop = m.scrollHeight; }")
        assert await page.evaluate(OVERFLOW) == []
        await shot(page, "web-phone", tmp_path)
        # the conversations are one tap away, and choosing one closes the menu
        assert not await page.is_visible("#sidebar")
        await page.click("#menu")
        await page.wait_for_selector("#sidebar", state="visible")
        assert await page.evaluate(OVERFLOW) == []
        await shot(page, "web-phone-menu", tmp_path)
        await page.click("#conversations button[data-conversation='another conversation']")
        await page.wait_for_selector("#sidebar", state="hidden")
        await page.wait_for_function("() => document.getElementById('title').textContent === 'another conversation'")
        await page.click("#menu")
        await page.click("#conversations button[data-conversation='layout']")
        await page.wait_for_selector(".msg.approval_request button.approve")
        # the approval buttons and the composer are big enough to tap, and work
        for selector in (".msg.approval_request button.approve", ".msg.approval_request button.deny", "#send"):
            box = await page.locator(selector).bounding_box()
            assert box is not None and box["height"] >= 36 and box["width"] >= 44, (selector, box)
        await page.click(".msg.approval_request button.approve")
        await page.wait_for_selector(".msg.approval_request .answer")
        await page.fill("#input", "thanks")
        await page.press("#input", "Enter")
        await page.wait_for_function(
            "() => [...document.querySelectorAll('.msg.thought')].some(n => n.textContent.includes('thanks'))"
        )
        assert await page.evaluate(OVERFLOW) == []
        assert errors == []
    await journal.aclose()
