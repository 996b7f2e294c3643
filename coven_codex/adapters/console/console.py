"""The console chat: the adapter kit's runner with the terminal as its platform.

Typed lines become thoughts; the kit's commands work as everywhere (``/cancel``, ``/new``,
``/status``, ``/approve [ID]``, ``/deny [ID]``), plus the console's own:

- ``/attach PATH-OR-URL [TEXT]``: send TEXT with a file (an image) attached;
- ``/conversation NAME``: switch conversation (its history is shown);
- ``/help``, ``/quit``.

The terminal cannot edit what it printed (``Capabilities(edits=False)``): with ``--render quiet``
a turn's progress card is printed once, at its end; a streamed reply is written as it grows on one line
and completed by the final reply (shown whole instead when another line came in between).
The console has no platform memory to reconcile with after a crash: it starts afresh each run
(showing history) and its ledger lives in memory (see :mod:`coven_codex.adapters.kit.ledger`).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TextIO

from coven_codex.adapters.kit.access import AccessPolicy
from coven_codex.adapters.kit.ledger import DeliveryLedger
from coven_codex.adapters.kit.mapping import NamedMap
from coven_codex.adapters.kit.platform import Address, Capabilities, Incoming, IncomingMessage, Outgoing, User
from coven_codex.adapters.kit.render import AnsiDialect, Dialect, PlainDialect, RenderMode, RenderOptions
from coven_codex.adapters.kit.runner import AdapterRunner, RunnerOptions
from coven_codex.entries import Attachment
from coven_codex.journal import Journal

QUIT_NOTE = "leave (the daemon keeps running)"
EDIT_INTERVAL = 0.05
CLEAR_LINE = "\r\x1b[K"


def console_help(quit_note: str) -> str:
    """The console's ``/help``."""
    return f"""commands:
  /cancel              stop the running turn
  /new                 start a fresh Codex session in this conversation
  /status              running or idle, queued messages, thread, token usage
  /approve [ID]        approve the oldest (or the given) pending request
  /deny [ID]           deny it
  /list                the conversations you wrote in, the latest first
  /history [N]         the last N exchanges here (default 5, at most 20)
  /project [NAME]      work in one of the operator's projects (a new Codex thread); alone: list them
  /model [NAME]        use one of the operator's models from the next message; alone: list them
  /mode [NAME]         read-only, ask or auto, as the operator allows; alone: list them
  /attach FILE [TEXT]  send TEXT with a file (an image) attached
  /conversation NAME   switch conversation
  /quit                {quit_note}
anything else is sent to Codex"""


class ConsolePlatform:
    """The terminal as a platform: posts are printed lines, edits extend the line being streamed."""

    name = "console"
    capabilities = Capabilities(edit_interval=EDIT_INTERVAL, can_find=False, echoes_own_messages=True, edits=False)

    def __init__(self, out: TextIO, colour: bool, prompt: str | None) -> None:
        self.out = out
        self.dialect: Dialect = AnsiDialect() if colour else PlainDialect()
        self.prompt = prompt
        self.events: AsyncIterator[Incoming] | None = None
        self._count = 0
        self._live: str | None = None
        self._live_text = ""

    def _write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def _end_live(self) -> None:
        if self._live is not None:
            self._write("\n")
            self._live = None

    def print(self, text: str) -> None:
        """Print a line of the console's own (a notice, the help), keeping the prompt last."""
        self._end_live()
        self._write((CLEAR_LINE if self.prompt is not None else "") + text + "\n")
        self.show_prompt()

    def show_prompt(self) -> None:
        """Write the input prompt (interactive terminals only)."""
        if self.prompt is not None and self._live is None:
            self._write(self.prompt)

    async def post(self, address: Address, message: Outgoing, key: str | None) -> str:
        """Print ``message``; an unfinished (streamed) one stays open on its line."""
        self._count += 1
        message_id = str(self._count)
        text = f"  [{message.text}]" if message.style == "notice" else message.text
        if message.file is not None:  # files out: the console is on the same machine, so the path says where
            text = f"codex sent a file: {message.file.path} ({message.file.name}, {message.file.size} bytes): {text}"
        if message.final:
            self.print(text)
        else:
            self._end_live()
            self._write((CLEAR_LINE if self.prompt is not None else "") + text)
            self._live, self._live_text = message_id, text
        return message_id

    async def edit(self, address: Address, message_id: str, message: Outgoing) -> None:
        """Extend the streamed line; a final text that does not extend it is printed whole."""
        if message_id == self._live and message.text.startswith(self._live_text):
            self._write(message.text[len(self._live_text) :])
            self._live_text = message.text
            if message.final:
                self._write("\n")
                self._live = None
                self.show_prompt()
        elif message.final:
            self.print(message.text)

    async def delete(self, address: Address, message_id: str) -> None:
        """A terminal cannot take back a line; nothing to do."""

    async def typing(self, address: Address, active: bool) -> None:
        """Status lines already say when a turn starts and ends."""

    async def find(self, address: Address, key: str) -> str | None:
        """Never asked (``can_find`` is False)."""
        return None

    async def incoming(self) -> AsyncIterator[Incoming]:
        """What ``ConsoleChat`` reads from the keyboard."""
        assert self.events is not None
        async for event in self.events:
            yield event


class ConsoleChat:
    """A console chat on ``journal`` in ``conversation``, as ``sender``, printing to ``out``."""

    def __init__(
        self,
        journal: Journal,
        conversation: str,
        sender: str,
        out: TextIO,
        *,
        colour: bool = False,
        history: int = 50,
        prompt: bool = False,
        quit_note: str = QUIT_NOTE,
        render: RenderMode = RenderMode.VERBOSE,
    ) -> None:
        """``render``: ``verbose`` prints every step as it happens (with the turn's status lines);
        ``quiet`` prints one progress card per turn at its end, then the reply."""
        self.journal = journal
        self.conversation = conversation
        self.sender = sender
        self.quit_note = quit_note
        self.platform = ConsolePlatform(out, colour, f"{sender}> " if prompt else None)
        self.mapping = NamedMap({conversation})
        options = RunnerOptions(
            render=RenderOptions(
                show_reasoning=True, show_status=render is RenderMode.VERBOSE, show_thoughts=True, mode=render
            ),
            start="end",
            resume=False,
            history=history,
        )
        self.runner = AdapterRunner(
            journal,
            self.platform,
            self.mapping,
            AccessPolicy.everyone(),
            DeliveryLedger.memory(),
            name=f"console {sender[:40]}@{os.getpid()}",
            options=options,
        )

    async def run(self, lines: AsyncIterator[str]) -> None:
        """Show history, then follow the journal and send typed lines until EOF or /quit."""
        self.platform.events = self._events(lines)
        await self.runner.run()

    def _address(self) -> Address:
        return Address(channel=self.conversation)

    async def _events(self, lines: AsyncIterator[str]) -> AsyncIterator[Incoming]:
        await self.runner.ready.wait()
        self.platform.print(f"[conversation {self.conversation}; /help for commands]")
        user = User(id=self.sender)
        async for raw in lines:
            line = raw.strip()
            if not line:
                self.platform.show_prompt()
                continue
            name, _, argument = line.partition(" ")
            match name:
                case "/quit" | "/exit":
                    return
                case "/help":
                    self.platform.print(console_help(self.quit_note))
                case "/conversation":
                    await self._switch(argument.strip())
                case "/attach":
                    target, _, text = argument.strip().partition(" ")
                    if not target:
                        self.platform.print("usage: /attach FILE-OR-URL [TEXT]")
                        continue
                    yield IncomingMessage(self._address(), user, text.strip(), (_attachment(target),))
                case _:
                    yield IncomingMessage(self._address(), user, line)
            self.platform.show_prompt()

    async def _switch(self, name: str) -> None:
        if not name:
            self.platform.print(f"you are in conversation {self.conversation}; /conversation NAME to switch")
            return
        self.conversation = name
        self.mapping.joined.clear()
        self.mapping.joined.add(name)
        self.platform.print(f"[conversation {name}]")
        await self.runner.show_history(await self.journal.end_position())


def _attachment(target: str) -> Attachment:
    url = target if "://" in target else Path(target).expanduser().resolve().as_uri()
    suffix = target.rsplit(".", 1)[-1].lower() if "." in target else ""
    media = {
        "png": "image/png",
        "jpg": "image/jpeg",
        "jpeg": "image/jpeg",
        "gif": "image/gif",
        "webp": "image/webp",
    }.get(suffix, "application/octet-stream")
    return Attachment(url=url, media_type=media, name=target.rsplit("/", 1)[-1][:200])


async def stdin_lines() -> AsyncIterator[str]:
    """Lines typed on standard input (a terminal or a pipe), read without blocking the loop."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    try:
        while line := await reader.readline():
            yield line.decode("utf-8", errors="replace")
    finally:
        transport.close()
