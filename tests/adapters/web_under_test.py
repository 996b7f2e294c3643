"""The web page as an adapter under the kit's adapter contract suite (``tests/adapters/``).

It has the attributes and methods of the suite's ``AdapterUnderTest``: the page server is the
adapter process (``kill()`` is ``kill -9`` of it); the platform is headless Chromium showing the
page, and ``messages()`` reads what its DOM shows. Register it in the suite with
``ADAPTERS["web"] = WebAdapter`` and ``CRASH_SAFE["web"] = WebAdapter``.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from playwright.async_api import BrowserContext, Page, Playwright, async_playwright

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "web"))
from web_helpers import CHROMIUM, CHROMIUM_ARGS, WebServer

MESSAGES = """() => {
  // A turn's steps are gathered in a folded group (.msg.steps): each step is shown as its own message.
  const nodes = document.querySelectorAll('#messages > .msg:not(.steps), #messages > .steps > .msg');
  const shown = [...nodes].map((node) => ({
    text: node.parentElement.classList.contains('steps') ? node.textContent : node.innerText,  // folded: not rendered
    actions: [...node.querySelectorAll('.buttons button')].map((b) => `${b.className} ${node.dataset.request}`),
    final: !node.classList.contains('stream'),
  }));
  const notice = document.getElementById('notice');
  if (!notice.hidden && notice.textContent) shown.push({text: notice.textContent, actions: [], final: true});
  return shown;
}"""


@dataclass(frozen=True)
class Shown:
    """One message as the page shows it (the suite's ``Shown``, structurally)."""

    channel: str
    text: str
    actions: tuple[str, ...] = ()
    final: bool = True


class WebAdapter:
    """``coven-codex web`` in its own process, with Chromium showing conversation ``channel``."""

    name = "web"
    network = False
    crash_safe = True
    limit = None

    def __init__(self, folder: Path, channel: str = "general") -> None:
        self.folder = folder
        self.journal = folder / "journal.jsonl"
        self.channel = channel
        self.server = WebServer(self.journal, folder)
        self._playwright: Playwright | None = None
        self._browser: BrowserContext | None = None
        self._page: Page | None = None
        self._profiles = 0
        self._last: list[Shown] = []
        """What the page showed when the browser was closed (``messages()`` after ``stop()``)."""

    def conversation(self, channel: str, user: str) -> str:
        """A page's conversation is its channel."""
        return channel

    async def start(self) -> None:
        """Start the page server (on its previous port) and, the first time, the browser."""
        url = await self.server.start()
        if self._page is None:
            self._profiles += 1
            self._playwright = await async_playwright().start()
            self._browser = await self._playwright.chromium.launch_persistent_context(
                str(self.folder / f"chromium-profile-{self._profiles}"),
                executable_path=CHROMIUM,
                headless=True,
                args=CHROMIUM_ARGS,
            )
            self._page = await self._browser.new_page()
            await self._page.goto(f"{url}#c={self.channel}")
        await self._page.wait_for_function(
            "() => document.getElementById('connection').textContent === 'connected'", timeout=30_000
        )

    async def kill(self) -> None:
        """``kill -9`` of the page server; the page stays open and reconnects after ``start()``."""
        if self.alive():
            await self.server.kill9()

    def alive(self) -> bool:
        """Whether the page server runs."""
        return self.server.process is not None and self.server.process.returncode is None

    async def stop(self) -> None:
        """Stop the page server (SIGTERM, must exit 0) and close the browser."""
        try:
            if self._page is not None:
                self._last = await self.messages()
            if self.alive():
                assert await self.server.stop() == 0, self.server.log()
        finally:
            if self._browser is not None:
                with contextlib.suppress(Exception):
                    await self._browser.close()
            if self._playwright is not None:
                await self._playwright.stop()
            self._browser = self._playwright = self._page = None

    async def say(self, channel: str, user: str, text: str, attachments: tuple[dict[str, str], ...] = ()) -> None:
        """Type ``text`` (images in ``attachments`` are uploaded first) and press Enter."""
        assert channel == self.channel and self._page is not None
        for index, attachment in enumerate(attachments, start=1):
            await self._page.set_input_files("#file", unquote(urlparse(attachment["url"]).path))
            await self._page.wait_for_function(
                "n => document.querySelectorAll('#attachments img').length >= n", arg=index
            )
        await self._page.fill("#input", text)
        await self._page.press("#input", "Enter")

    async def press(self, channel: str, user: str, action: str) -> None:
        """Press a button: ``approve ID``, ``approve-session ID``, ``deny ID`` under the request; ``cancel``,
        ``new`` as commands."""
        assert channel == self.channel and self._page is not None
        verb, _, request_id = action.partition(" ")
        if verb in ("approve", "approve-session", "deny") and request_id:
            for node in await self._page.query_selector_all(".msg.approval_request"):
                if await node.get_attribute("data-request") == request_id:
                    button = await node.query_selector(f"button.{verb}")
                    assert button is not None
                    await button.click()
                    return
            raise AssertionError(f"no approval request {request_id} on the page")
        await self.say(channel, user, f"/{action}")

    async def messages(self) -> list[Shown]:
        """What the page's DOM shows, in order (and the notice line, where command answers go);
        after ``stop()``, what it showed then."""
        if self._page is None:
            return list(self._last)
        shown = await self._page.evaluate(MESSAGES)
        return [Shown(self.channel, item["text"], tuple(item["actions"]), item["final"]) for item in shown]
