"""``coven-codex slack`` as an adapter under test: the real command in its own process, against the fake Slack.

The fake (``slack_fake.py``) runs in the test's event loop; the adapter reaches it through
``api_url`` in its ``coven.toml`` (the Web API) and the WebSocket URL that ``apps.connections.open``
hands out (Socket Mode). A user's message is an ``app_mention`` in the thread of channel
``CGENERAL`` that is the conversation; a press is a ``block_actions`` payload. What users see is
read from the fake's messages (the bot's section blocks and buttons).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
from pathlib import Path
from typing import Any

from adapters_under_test import ROOT, Shown
from slack_fake import APP_TOKEN, BOT_TOKEN, TEAM, FakeSlack, actions_of, text_of

CHANNELS = {"general": "CGENERAL", "random": "CRANDOM", "ops": "COPS"}
USERS = {"ann": "UANN", "bob": "UBOB", "stranger": "USTRANGER"}


class SlackAdapter:
    """The Slack adapter process and the fake Slack it talks to (see the module docstring)."""

    name = "slack"
    network = True
    crash_safe = True
    limit = None  # Slack's limits (3,000 characters a section) are checked by the fake itself

    def __init__(
        self,
        folder: Path,
        *,
        chaos: float = 0.0,
        rate_limit_every: int = 0,
        burst: int = 0,
        extra_config: str = "",
        seed: int = 7,
        post_rate: float = 100.0,
        render: str = "verbose",
        context_messages: int = 0,
    ) -> None:
        """``render``: ``verbose`` (every step a message) unless asked; the progress card's tests ask for ``quiet``.
        ``context_messages``: 0 unless asked (the suite's threads start with a user's message, which the
        first mention would otherwise carry as context); the thread tests ask for it."""
        self.folder = folder
        self.journal = folder / "journal.jsonl"
        self.config = folder / "coven.toml"
        self.stderr = folder / "slack-adapter.log"
        self.fake = FakeSlack(
            rate_limit_every=rate_limit_every, burst=burst, retry_after="0" if rate_limit_every else "1"
        )
        self.chaos = chaos
        self.extra_config = f'render = "{render}"\n' + extra_config
        self.post_rate = post_rate
        self.context_messages = context_messages
        """``chat.postMessage`` calls a second per channel the adapter allows itself (Slack: 1; the
        suite's bursts of replies would otherwise take minutes)."""
        self.rng = random.Random(seed)
        self.process: asyncio.subprocess.Process | None = None
        self.roots: dict[str, str] = {}
        self.kills_by_chaos = 0
        self._started = False

    async def _start_fake(self) -> None:
        self.fake.channels.add("COPS")
        api = await self.fake.start()
        for name, channel in CHANNELS.items():
            self.roots[name] = str(self.fake.user_message(channel, "UANN", "a thread for Codex")["ts"])
        self.config.write_text(
            f'journal = "{self.journal}"\n'
            "[adapters.slack]\n"
            f'api_url = "{api}"\n'
            'allow_users = ["UANN", "UBOB"]\n'
            'admins = ["UANN"]\n'
            "edit_interval = 0.2\n"
            f"post_rate = {self.post_rate}\n"
            f"context_messages = {self.context_messages}\n" + self.extra_config
        )
        self.fake.after_write = self._maybe_die
        self._started = True

    def _maybe_die(self, method: str) -> None:
        if self.chaos and self.alive() and self.rng.random() < self.chaos:
            assert self.process is not None
            self.kills_by_chaos += 1
            os.kill(self.process.pid, signal.SIGKILL)

    def conversation(self, channel: str, user: str) -> str:
        return f"slack:{TEAM}/{CHANNELS[channel]}/{self.roots.get(channel) or self._root_ts(channel)}"

    def _root_ts(self, channel: str) -> str:
        index = list(CHANNELS).index(channel) + 1  # the fake's clock: the roots are its first messages
        return f"{1700000000 + index}.{index:06d}"

    async def start(self) -> None:
        if not self._started:
            await self._start_fake()
        offset = self.stderr.stat().st_size if self.stderr.exists() else 0
        env = {**os.environ, "SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_APP_TOKEN": APP_TOKEN, "PYTHONUNBUFFERED": "1"}
        with self.stderr.open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                str(ROOT / ".venv" / "bin" / "coven-codex"),
                "--log-level",
                "INFO",
                "slack",
                "--config",
                str(self.config),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=log,
                cwd=ROOT,
                env=env,
            )
        async with asyncio.timeout(60):
            while True:
                text = self.stderr.read_bytes()[offset:].decode(errors="replace")
                if "following" in text:
                    return
                if self.process.returncode is not None:
                    if self.process.returncode == -signal.SIGKILL:
                        return  # killed by the chaos hook while starting; the test starts it again
                    raise AssertionError(f"the Slack adapter exited: {text}")
                await asyncio.sleep(0.05)

    async def kill(self) -> None:
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
        if self.process is not None:
            async with asyncio.timeout(15):
                await self.process.wait()

    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(15):
                    await self.process.wait()
            finally:
                await self.kill()
            assert self.process.returncode == 0, self.stderr.read_text()

    async def close(self) -> None:
        """Stop the adapter and the fake."""
        await self.stop()
        await self.fake.stop()

    async def _files(self, attachments: tuple[dict[str, str], ...]) -> list[dict[str, Any]]:
        files = []
        for attachment in attachments:
            data = Path(attachment["url"].removeprefix("file://")).read_bytes()
            files.append(self.fake.add_file(data, attachment["media_type"], attachment["name"]))
        return files

    async def say(self, channel: str, user: str, text: str, attachments: tuple[dict[str, str], ...] = ()) -> None:
        if not self._started:
            await self._start_fake()
        files = await self._files(attachments)
        await self.fake.mention(CHANNELS[channel], USERS[user], text, self.roots[channel], files or None)

    async def press(self, channel: str, user: str, action: str) -> None:
        target = CHANNELS[channel]
        carrying = [m for m in self.fake.bot_messages(target) if action in actions_of(m)]
        message_ts = str(carrying[-1]["ts"]) if carrying else self.roots[channel]
        await self.fake.press(target, USERS[user], action, message_ts, self.roots[channel])

    async def messages(self) -> list[Shown]:
        names = {channel: name for name, channel in CHANNELS.items()}
        return [
            Shown(names.get(m["channel"], m["channel"]), text_of(m), actions_of(m), "cancel" not in actions_of(m))
            for m in self.fake.bot_messages()
        ]
