"""The web page as an adapter under the kit's adapter contract suite (``tests/adapters/``).

It has the attributes and methods of the suite's ``AdapterUnderTest``: the page server is the
adapter process (``kill()`` is ``kill -9`` of it); the platform is headless Chromium showing the
page (one tab per channel), and ``messages()`` reads what their DOM shows. Register it in the
suite with ``ADAPTERS["web"] = WebAdapter`` and ``CRASH_SAFE["web"] = WebAdapter``.

The tabs reach the server through :class:`FlakyLink`, a TCP relay in the test's process, so that
the browser's side can have a bad day (:meth:`WebAdapter.misbehave`): the live channel cut
mid-stream (both ends' connections aborted), a slow reader (the relay stops reading the server's
side for a while: the server's writes back up), a reconnect with a stale cursor (a tab's journal
position set back to an earlier one it had, then the channel cut: the server sends again what
the tab already shows).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse, urlsplit, urlunsplit

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


UPSTREAM_WAIT = 30.0
"""Seconds :class:`FlakyLink` holds a browser's connection while the page server is down."""


@dataclass
class FlakyLink:
    """A TCP relay from ``[::1]:port`` to the page server at ``127.0.0.1:port`` that can cut or stall its connections.

    The same port on IPv6's loopback: the page server answers for its loopback names with its own
    port only (``[::1]:port`` among them), so the relay is transparent to it.
    """

    port: int
    cuts: int = 0
    stalls: int = 0
    _server: asyncio.Server | None = None
    _links: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = field(default_factory=set)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _flowing: asyncio.Event = field(default_factory=asyncio.Event)
    _resume: asyncio.TimerHandle | None = None

    async def start(self) -> None:
        """Listen."""
        self._flowing.set()
        self._server = await asyncio.start_server(self._serve, "::1", self.port)

    async def aclose(self) -> None:
        """Stop listening and end every relayed connection."""
        if self._resume is not None:
            self._resume.cancel()
        self._flowing.set()
        if self._server is not None:
            self._server.close()
        self.cut()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def cut(self) -> None:
        """Abort every relayed connection at both ends (no closing handshake: a cut)."""
        for browser, server in list(self._links):
            for end in (browser, server):
                end.transport.abort()
        self._links.clear()
        self.cuts += 1

    def stall(self, seconds: float) -> None:
        """Read nothing from the server's side for ``seconds`` (a slow reader)."""
        self._flowing.clear()
        self.stalls += 1
        if self._resume is not None:
            self._resume.cancel()
        self._resume = asyncio.get_running_loop().call_later(seconds, self._flowing.set)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        upstream: asyncio.StreamWriter | None = None
        try:
            up_reader, upstream = await self._upstream()
            link = (writer, upstream)
            self._links.add(link)
            pipes = [
                asyncio.create_task(self._pipe(reader, upstream, None)),
                asyncio.create_task(self._pipe(up_reader, writer, self._flowing)),
            ]
            try:
                await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)  # either side ended: close both
            finally:
                for pipe in pipes:
                    pipe.cancel()
                await asyncio.gather(*pipes, return_exceptions=True)
                self._links.discard(link)
        except (OSError, TimeoutError):
            pass  # the server stayed down: the browser sees its connection closed and retries
        finally:
            for end in (upstream, writer):
                if end is not None:
                    end.close()
            self._tasks.discard(task)

    async def _upstream(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to the page server; while it is down (killed, starting again), the browser's waits."""
        async with asyncio.timeout(UPSTREAM_WAIT):
            while True:
                try:
                    return await asyncio.open_connection("127.0.0.1", self.port)
                except ConnectionRefusedError:
                    await asyncio.sleep(0.05)

    @staticmethod
    async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter, flowing: asyncio.Event | None) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while True:
                if flowing is not None:
                    await flowing.wait()
                data = await source.read(65536)
                if not data:
                    return
                sink.write(data)
                await sink.drain()


@dataclass(frozen=True)
class Shown:
    """One message as the page shows it (the suite's ``Shown``, structurally)."""

    channel: str
    text: str
    actions: tuple[str, ...] = ()
    final: bool = True


class WebAdapter:
    """``coven-codex web`` in its own process, with a Chromium tab showing each of ``channels``.

    ``flaky``: the tabs reach the server through a :class:`FlakyLink` (:meth:`misbehave`).
    """

    name = "web"
    network = False
    crash_safe = True
    limit = None

    def __init__(self, folder: Path, channels: tuple[str, ...] = ("general",), *, flaky: bool = False) -> None:
        self.folder = folder
        self.journal = folder / "journal.jsonl"
        self.channels = channels
        self.server = WebServer(self.journal, folder)
        self.link: FlakyLink | None = None
        self.flaky = flaky
        self.bad_moments = 0
        """How many times :meth:`misbehave` made the browser's side fail."""
        self._playwright: Playwright | None = None
        self._browser: BrowserContext | None = None
        self._pages: dict[str, Page] = {}
        self._cursors: dict[str, object] = {}
        self._moments: set[asyncio.Task[None]] = set()
        self._profiles = 0
        self._last: list[Shown] = []
        """What the pages showed when the browser was closed (``messages()`` after ``stop()``)."""

    @property
    def process(self) -> asyncio.subprocess.Process | None:
        """The page server's process."""
        return self.server.process

    def conversation(self, channel: str, user: str) -> str:
        """A page's conversation is its channel."""
        return channel

    async def start(self) -> None:
        """Start the page server (on its previous port) and, the first time, the browser and its tabs."""
        url = await self.server.start()
        if self.flaky and self.link is None:
            self.link = FlakyLink(self.server.port)
            await self.link.start()
        if self.link is not None:
            parts = urlsplit(url)
            url = urlunsplit(parts._replace(netloc=f"[::1]:{self.link.port}"))
        if not self._pages:
            self._profiles += 1
            self._playwright = await async_playwright().start()
            self._browser = await self._playwright.chromium.launch_persistent_context(
                str(self.folder / f"chromium-profile-{self._profiles}"),
                executable_path=CHROMIUM,
                headless=True,
                args=CHROMIUM_ARGS,
            )
            for channel in self.channels:
                page = self._pages[channel] = await self._browser.new_page()
                await page.goto(f"{url}#c={channel}")
                await self._connected(page)  # the first tab keeps the device key the others log in with
        for page in self._pages.values():
            await self._connected(page)

    @staticmethod
    async def _connected(page: Page) -> None:
        await page.wait_for_function(
            "() => document.getElementById('connection').textContent === 'connected'", timeout=30_000
        )

    async def kill(self) -> None:
        """``kill -9`` of the page server; the pages stay open and reconnect after ``start()``."""
        if self.alive():
            await self.server.kill9()

    def alive(self) -> bool:
        """Whether the page server runs."""
        return self.server.process is not None and self.server.process.returncode is None

    async def misbehave(self, rng: random.Random) -> None:
        """One bad moment on the browser's side within the next 1.5 s: a cut, a slow reader, or a
        reconnect with a stale cursor."""
        assert self.link is not None, "WebAdapter(flaky=True) misbehaves"
        roll, delay = rng.random(), rng.uniform(0, 1.5)
        stall, channel = rng.uniform(0.3, 1.5), rng.choice(self.channels)
        task = asyncio.create_task(self._moment(delay, roll, stall, channel))
        self._moments.add(task)
        task.add_done_callback(self._moments.discard)

    def moments_pending(self) -> bool:
        """Whether a bad moment :meth:`misbehave` made has yet to happen."""
        return bool(self._moments)

    async def _moment(self, delay: float, roll: float, stall: float, channel: str) -> None:
        await asyncio.sleep(delay)
        assert self.link is not None
        if roll < 0.4:
            self.link.cut()
        elif roll < 0.7:
            self.link.stall(stall)
        else:
            page = self._pages[channel]
            now = await page.evaluate("() => state.after")
            await page.evaluate("(after) => { state.after = after; }", self._cursors.get(channel))
            self._cursors[channel] = now
            self.link.cut()
        self.bad_moments += 1

    async def stop(self) -> None:
        """Stop the page server (SIGTERM, must exit 0) and close the browser."""
        for moment in list(self._moments):
            moment.cancel()
        await asyncio.gather(*self._moments, return_exceptions=True)
        try:
            if self._pages:
                self._last = await self.messages()
            if self.alive():
                assert await self.server.stop() == 0, self.server.log()
        finally:
            if self._browser is not None:
                with contextlib.suppress(Exception):
                    await self._browser.close()
            if self._playwright is not None:
                await self._playwright.stop()
            if self.link is not None:
                await self.link.aclose()
            self._browser = self._playwright = self.link = None
            self._pages = {}

    def _page(self, channel: str) -> Page:
        assert channel in self._pages, (channel, list(self._pages))
        return self._pages[channel]

    async def say(self, channel: str, user: str, text: str, attachments: tuple[dict[str, str], ...] = ()) -> None:
        """Type ``text`` (images in ``attachments`` are uploaded first) and press Enter."""
        page = self._page(channel)
        for index, attachment in enumerate(attachments, start=1):
            await page.set_input_files("#file", unquote(urlparse(attachment["url"]).path))
            await page.wait_for_function("n => document.querySelectorAll('#attachments img').length >= n", arg=index)
        await page.fill("#input", text)
        await page.press("#input", "Enter")

    async def press(self, channel: str, user: str, action: str) -> None:
        """Press a button: ``approve ID``, ``approve-session ID``, ``deny ID`` under the request; ``cancel``,
        ``new`` as commands."""
        page = self._page(channel)
        verb, _, request_id = action.partition(" ")
        if verb in ("approve", "approve-session", "deny") and request_id:
            for node in await page.query_selector_all(".msg.approval_request"):
                if await node.get_attribute("data-request") == request_id:
                    button = await node.query_selector(f"button.{verb}")
                    assert button is not None
                    await button.click()
                    return
            raise AssertionError(f"no approval request {request_id} on the page")
        await self.say(channel, user, f"/{action}")

    async def messages(self) -> list[Shown]:
        """What the tabs' DOM shows, in order (and each one's notice line, where command answers go);
        after ``stop()``, what they showed then."""
        if not self._pages:
            return list(self._last)
        shown: list[Shown] = []
        for channel, page in self._pages.items():
            items = await page.evaluate(MESSAGES)
            shown += [Shown(channel, item["text"], tuple(item["actions"]), item["final"]) for item in items]
        return shown
