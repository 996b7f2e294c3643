"""The Discord adapter under the kit's adapter contract suite (``test_adapter_contract.py``).

``coven-codex discord`` runs as its own process against the local fake of Discord
(``discord_fake.py``: REST API, Gateway, CDN) served in the test's process: ``say`` dispatches a
``MESSAGE_CREATE`` mentioning the bot, ``press`` an ``INTERACTION_CREATE`` for the button under
the newest message carrying that action (a command no button carries, such as ``cancel`` when
nothing is streamed, is run as its slash command), and ``messages()`` is what the fake holds
(each message's text after its last edit, its buttons; a message still carrying the Cancel
button is a stream not yet final). The fake keeps its messages across adapter restarts, as
Discord does; ``stop()`` also stops serving it (``start()`` serves it again).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path
from typing import Any

from adapters_under_test import Shown
from aiohttp import web
from discord_fake import CHANNEL_ID, GUILD_ID, TEST_TOKEN, FakeDiscord, start_adapter

from coven_codex.adapters.kit.runner import CANCEL_BUTTONS

USERS = {"ann": "5000000000000000001", "bob": "5000000000000000002", "stranger": "5000000000000000009"}
"""The suite's users as Discord user ids."""
CHANNELS = {"general": CHANNEL_ID, "random": "2000000000000000101", "ops": "2000000000000000102"}
"""The suite's conversations: the channel itself, and two threads in it (threads are channels of their own)."""


class DiscordAdapter:
    """``coven-codex discord`` on the fake Discord (see the module docstring)."""

    name = "discord"
    network = True
    crash_safe = True
    limit = 2000
    STARTED = "coven-codex discord: connected as"

    def __init__(self, folder: Path, rate_limit_every: int = 0) -> None:
        self.folder = folder
        self.journal = folder / "journal.jsonl"
        self.stderr = folder / "adapter.log"
        self.fake = FakeDiscord(token=TEST_TOKEN, rate_limit_every=rate_limit_every)
        self.process: asyncio.subprocess.Process | None = None
        self._server: web.AppRunner | None = None
        self._port = 0

    def conversation(self, channel: str, user: str) -> str:
        thread = "" if channel == "general" else CHANNELS[channel]
        return f"discord:{GUILD_ID}/{CHANNEL_ID}/{thread}"

    async def start(self) -> None:
        if self._server is None:
            self._server = web.AppRunner(self.fake.app())
            await self._server.setup()
            site = web.TCPSite(self._server, "127.0.0.1", self._port)
            await site.start()
            self._port = self._server.addresses[0][1]
        starts = self._log().count(self.STARTED)
        with self.stderr.open("ab") as log:
            self.process = await start_adapter(
                self.journal,
                self._port,
                stderr=log.fileno(),
                allow_users=[USERS["ann"], USERS["bob"]],
                admins=[USERS["ann"]],
            )
        async with asyncio.timeout(30):
            while self._log().count(self.STARTED) == starts:
                assert self.process.returncode is None, self._log()
                await asyncio.sleep(0.05)

    def _log(self) -> str:
        return self.stderr.read_text(errors="replace") if self.stderr.exists() else ""

    async def _end(self, sig: int) -> None:
        if self.process is None or self.process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(sig)
        async with asyncio.timeout(20):
            await self.process.wait()

    async def kill(self) -> None:
        await self._end(signal.SIGKILL)

    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def stop(self) -> None:
        await self._end(signal.SIGTERM)
        assert self.process is None or self.process.returncode in (0, -signal.SIGKILL), self._log()
        if self._server is not None:
            self.fake.faults.release()
            await self._server.cleanup()
            self._server = None

    async def say(self, channel: str, user: str, text: str, attachments: tuple[dict[str, str], ...] = ()) -> None:
        assert channel == "general"
        files: list[dict[str, Any]] = []
        for attachment in attachments:
            data = Path(attachment["url"].removeprefix("file://")).read_bytes()
            files.append(self.fake.attachment(f"http://127.0.0.1:{self._port}", attachment["name"], data))
        payload = self.fake.user_message(USERS[user], text, attachments=tuple(files))
        await self.fake.dispatch("MESSAGE_CREATE", payload)

    async def press(self, channel: str, user: str, action: str) -> None:
        assert channel == "general"
        carrying = [m for m in self.fake.in_channel(CHANNEL_ID) if action in _actions(m.components)]
        if carrying:
            payload = self.fake.button_press(USERS[user], carrying[-1].id, action)
        else:
            payload = self.fake.slash_command(USERS[user], action)
        await self.fake.dispatch("INTERACTION_CREATE", payload)

    async def messages(self) -> list[Shown]:
        cancel = CANCEL_BUTTONS[0].action
        shown = []
        for name, channel in CHANNELS.items():
            for message in self.fake.in_channel(channel):
                actions = _actions(message.components)
                shown.append(Shown(name, message.content, actions, cancel not in actions))
        return shown


def _actions(components: list[Any]) -> tuple[str, ...]:
    """The ``custom_id`` of every button in a message's action rows."""
    return tuple(str(c["custom_id"]) for row in components for c in row.get("components", []) if "custom_id" in c)
