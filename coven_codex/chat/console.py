"""The console chat: a minimal chat adapter on a journal.

It does only what any adapter does: append ``thought`` (and ``cancel``/``approval``)
entries, and show the entries that come back. Typed lines become thoughts; commands:

- ``/cancel``: ask Codex to stop the running turn
- ``/approve [ID]`` and ``/deny [ID]``: answer an approval request (the oldest open one by default)
- ``/conversation NAME``: switch conversation (its history is shown)
- ``/help``, ``/quit``
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Literal, TextIO

from coven_codex.chat.render import Painter, render_entry
from coven_codex.chat.stream_view import StreamView
from coven_codex.entries import (
    ApprovalEntry,
    ApprovalRequestEntry,
    BaseEntry,
    CancelEntry,
    DeltaEntry,
    ResponseEntry,
    ThoughtEntry,
)
from coven_codex.journal import BadLine, Journal, JournalRecord

HELP = """commands:
  /cancel              stop the running turn
  /approve [ID]        approve the oldest (or the given) pending request
  /deny [ID]           deny it
  /conversation NAME   switch conversation
  /quit                leave (the daemon keeps running)
anything else is sent to Codex as a thought"""


@dataclass
class ConsoleChat:
    journal: Journal
    conversation: str
    sender: str
    out: TextIO
    colour: bool = False
    history: int = 50
    _painter: Painter = field(init=False)
    _pending: dict[str, list[str]] = field(default_factory=dict, init=False)
    _stream: StreamView = field(init=False)

    def __post_init__(self) -> None:
        self._painter = Painter(self.colour)
        self._stream = StreamView(self.out, self._painter.paint("response", "codex: "))

    async def run(self, lines: AsyncIterator[str]) -> None:
        """Show history, then follow the journal and send typed lines until EOF or /quit."""
        start = await self.journal.end_position()
        await self._show_history(start)
        self._print(self._painter.paint("status", f"[conversation {self.conversation}; /help for commands]"))
        async with asyncio.TaskGroup() as group:
            follower = group.create_task(self._follow(start))
            try:
                await self._read_input(lines)
            finally:
                follower.cancel()

    async def _show_history(self, end: int) -> None:
        shown: list[BaseEntry] = []
        self._pending.pop(self.conversation, None)
        for item in await self.journal.read(0, end):
            if isinstance(item, JournalRecord) and item.entry.conversation == self.conversation:
                self._track_approvals(item.entry)
                if item.entry.kind != "delta":
                    shown.append(item.entry)
        for entry in shown[-self.history :] if self.history else []:
            self._display(entry)

    async def _follow(self, start: int) -> None:
        async for item in self.journal.tail(start):
            if isinstance(item, BadLine):
                continue
            entry = item.entry
            if entry.conversation != self.conversation:
                continue
            self._track_approvals(entry)
            if entry.sender == self.sender and entry.kind in ("thought", "cancel", "approval"):
                continue  # what this console typed is already on the screen
            self._display(entry)

    def _track_approvals(self, entry: BaseEntry) -> None:
        pending = self._pending.setdefault(entry.conversation, [])
        if isinstance(entry, ApprovalRequestEntry) and entry.request_id not in pending:
            pending.append(entry.request_id)
        elif isinstance(entry, ApprovalEntry) and entry.request_id in pending:
            pending.remove(entry.request_id)

    def _display(self, entry: BaseEntry) -> None:
        if isinstance(entry, DeltaEntry):
            self._stream.delta(entry.item_id, entry.text)
            return
        if isinstance(entry, ResponseEntry) and self._stream.response(entry.text):
            return
        self._stream.interrupt()
        text = render_entry(entry, self._painter)
        if text is not None:
            self._print(text)

    def _print(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    async def _read_input(self, lines: AsyncIterator[str]) -> None:
        async for raw in lines:
            line = raw.strip()
            if not line:
                continue
            if line.startswith("/"):
                if not await self._command(line):
                    return
                continue
            await self.journal.append(
                ThoughtEntry(text=line, conversation=self.conversation, sender=self.sender)
            )

    async def _command(self, line: str) -> bool:
        """Run a slash command; False when the chat should end."""
        name, _, argument = line.partition(" ")
        argument = argument.strip()
        match name:
            case "/quit" | "/exit":
                return False
            case "/help":
                self._print(HELP)
            case "/cancel":
                await self.journal.append(CancelEntry(conversation=self.conversation, sender=self.sender))
                self._print(self._painter.paint("status", "  [cancel sent]"))
            case "/approve" | "/deny":
                await self._answer(name == "/approve", argument)
            case "/conversation":
                if not argument:
                    self._print(f"you are in conversation {self.conversation}; /conversation NAME to switch")
                else:
                    self.conversation = argument
                    self._stream.forget()
                    self._print(self._painter.paint("status", f"[conversation {argument}]"))
                    await self._show_history(await self.journal.end_position())
            case _:
                self._print(f"unknown command {name}; /help lists the commands")
        return True

    async def _answer(self, approve: bool, request_id: str) -> None:
        pending = self._pending.get(self.conversation, [])
        if not request_id:
            if not pending:
                self._print("no approval request is waiting in this conversation")
                return
            request_id = pending[0]
        decision: Literal["approve", "deny"] = "approve" if approve else "deny"
        await self.journal.append(
            ApprovalEntry(conversation=self.conversation, sender=self.sender, request_id=request_id,
                          decision=decision)
        )
        with contextlib.suppress(ValueError):
            pending.remove(request_id)
        self._print(self._painter.paint("status", f"  [{decision} sent for {request_id}]"))


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
