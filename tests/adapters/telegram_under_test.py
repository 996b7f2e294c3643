"""``coven-codex telegram`` as an adapter under test: the real command in its own process, against the fake Bot API.

The fake (``telegram_fake.py``) runs in the test's event loop; the adapter reaches it through
``--api-url``. The suite's conversations live in one forum supergroup: ``general`` is its general
part, ``random`` and ``ops`` two of its topics. A user's message mentions the bot there; a press is
a ``callback_query`` on the newest message carrying the action (a command no button carries, such
as ``cancel`` when nothing is streamed, is typed as ``/cancel``). What users see is the fake's
record of the bot's messages (their text as shown, their keyboards).

Telegram cannot say whether a message was already sent (no idempotency key, no history for bots):
a kill between Telegram creating a message and the ledger's record of it, or an answer lost to a
cut connection, repeats that message.
:meth:`TelegramAdapter.in_flight` reads the ledger's open intents after each kill, so the contract
suite counts repeats and checks each was in flight at a kill.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import sys
from pathlib import Path

from adapters_under_test import ROOT, Shown
from telegram_fake import TEST_TOKEN, FakeTelegram

from coven_codex.adapters.kit.ledger import content_digest, ledger_path

GROUP = -1001000000001
TOPICS = {"general": None, "random": 11, "ops": 12}
USERS = {"ann": 5001, "bob": 5002, "stranger": 5009}
STARTED = "coven-codex telegram: connected as"


def write_config(journal: Path, **section: object) -> Path:
    """A coven.toml beside ``journal``, naming it; ``[adapters.telegram]`` holds ``section``."""
    lines = [f"journal = {json.dumps(str(journal))}", "", "[adapters.telegram]"]
    lines += [f"{key} = {json.dumps(value)}" for key, value in section.items()]
    config = journal.parent / "telegram.toml"
    config.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return config


async def start_adapter(
    journal: Path,
    api: str,
    *,
    stderr: int | None = None,
    env: dict[str, str] | None = None,
    log_level: str = "INFO",
    **section: object,
) -> asyncio.subprocess.Process:
    """``coven-codex telegram`` as a process against the fake at ``api``; ``section`` is its configuration
    (``render`` is ``verbose``, every step a message, unless it says otherwise: most tests look at those)."""
    section = {
        "edit_interval": 0.2,
        "group_per_minute": 6000.0,
        "chat_per_minute": 6000.0,
        "render": "verbose",
        **section,
    }
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "coven_codex.cli.main",
        "--log-level",
        log_level,
        "telegram",
        "--config",
        str(write_config(journal, **section)),
        "--api-url",
        api,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=stderr,
        cwd=ROOT,
        env={**os.environ, "TELEGRAM_BOT_TOKEN": TEST_TOKEN, "PYTHONUNBUFFERED": "1", **(env or {})},
    )


class TelegramAdapter:
    """The Telegram adapter process and the fake Bot API it talks to (see the module docstring)."""

    name = "telegram"
    network = True
    crash_safe = True
    limit = 1500
    """The adapter runs with ``message_limit = 1500`` here, so the suite's long replies are split."""

    def __init__(self, folder: Path, *, chaos: float = 0.0, rate_limit_every: int = 0, seed: int = 11) -> None:
        self.folder = folder
        self.journal = folder / "journal.jsonl"
        self.stderr = folder / "telegram-adapter.log"
        self.fake = FakeTelegram(rate_limit_every=rate_limit_every)
        self.chaos = chaos
        self.rng = random.Random(seed)
        self.process: asyncio.subprocess.Process | None = None
        self.kills = 0
        """Kills (the test's and the chaos hook's) the ledger was read after."""
        self._noted: set[int] = set()
        self.in_flight_digests: set[str] = set()
        """Digests of the texts whose ledger intent had no message id at some kill."""
        self._api = ""

    def conversation(self, channel: str, user: str) -> str:
        topic = TOPICS[channel]
        return f"telegram:/{GROUP}/{'' if topic is None else topic}"

    def _maybe_die(self, method: str) -> None:
        if self.chaos and self.alive() and self.rng.random() < self.chaos:
            assert self.process is not None
            os.kill(self.process.pid, signal.SIGKILL)

    async def start(self) -> None:
        if not self._api:
            self._api = await self.fake.start()
            self.fake.after_write = self._maybe_die
        if self.process is not None and self.process.returncode == -signal.SIGKILL:
            self._note_in_flight()  # killed by the chaos hook since
        offset = self.stderr.stat().st_size if self.stderr.exists() else 0
        with self.stderr.open("ab") as log:
            self.process = await start_adapter(
                self.journal,
                self._api,
                stderr=log.fileno(),
                allow_users=[str(USERS["ann"]), str(USERS["bob"])],
                admins=[str(USERS["ann"])],
                message_limit=self.limit,
            )
        async with asyncio.timeout(60):
            while STARTED not in self.stderr.read_bytes()[offset:].decode(errors="replace"):
                if self.process.returncode is not None:
                    if self.process.returncode == -signal.SIGKILL:
                        self._note_in_flight()
                        return  # killed by the chaos hook while starting; the test starts it again
                    raise AssertionError(f"the Telegram adapter exited: {self.stderr.read_text()}")
                await asyncio.sleep(0.05)

    def _note_in_flight(self) -> None:
        """Remember the ledger's open intents (the only messages a restart may repeat), once per kill."""
        assert self.process is not None
        if self.process.pid in self._noted:
            return
        self._noted.add(self.process.pid)
        self.kills += 1
        path = ledger_path(self.journal, "telegram")
        if not path.exists():
            return
        open_intents: dict[str, str] = {}
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if "message" in record:
                open_intents.pop(record["key"], None)
            elif record.get("digest"):
                open_intents[record["key"]] = record["digest"]
        self.in_flight_digests |= set(open_intents.values())

    async def kill(self) -> None:
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
        if self.process is not None:
            async with asyncio.timeout(15):
                await self.process.wait()
            if self.process.returncode == -signal.SIGKILL:
                self._note_in_flight()

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
            assert self.process.returncode in (0, -signal.SIGKILL), self.stderr.read_text()

    async def close(self) -> None:
        """Stop the adapter and the fake."""
        await self.stop()
        await self.fake.stop()

    async def say(self, channel: str, user: str, text: str, attachments: tuple[dict[str, str], ...] = ()) -> None:
        if not self._api:
            await self.start()
        photo = None
        for attachment in attachments:
            photo = self.fake.add_file(Path(attachment["url"].removeprefix("file://")).read_bytes())
        mention = not text.startswith("/")
        self.fake.user_message(USERS[user], text, chat_id=GROUP, thread=TOPICS[channel], mention=mention, photo=photo)

    async def press(self, channel: str, user: str, action: str) -> None:
        carrying = [m for m in self.fake.in_chat(GROUP, TOPICS[channel]) if action in (b[1] for b in m.buttons)]
        if carrying:
            self.fake.press(USERS[user], carrying[-1], action)
        else:
            self.fake.user_message(USERS[user], "/" + action, chat_id=GROUP, thread=TOPICS[channel])

    def repeats(self, markers: list[str]) -> tuple[int, int, list[str]]:
        """Messages shown more than once: how many extra copies, how many may be, and those not explained.

        A marker shown more than once is repeated by every message carrying it but the newest;
        each such message's text (as sent) must be one the ledger held as an open intent at a kill,
        or one whose answer a cut connection lost (the bot cannot know it was created): at most one
        repeat per kill and per lost answer.
        """
        shown = self.fake.in_chat(GROUP, any_thread=True)
        extras: dict[tuple[int, int], str] = {}
        for marker in markers:
            carrying = [m for m in shown if marker in m.text]
            for message in carrying[:-1]:
                extras[(message.chat_id, message.message_id)] = message.raw
        unexplained = [
            raw
            for raw in extras.values()
            if content_digest(raw) not in self.in_flight_digests and raw not in self.fake.unanswered
        ]
        return len(extras), self.kills + len(self.fake.unanswered), unexplained

    async def messages(self) -> list[Shown]:
        names = {topic: name for name, topic in TOPICS.items()}
        return [
            Shown(names.get(m.thread, str(m.thread)), m.text, actions, "cancel" not in actions)
            for m in self.fake.in_chat(GROUP, any_thread=True)
            for actions in [tuple(b[1] for b in m.buttons)]
        ]
