"""The adapters the contract suite runs, each as a real process, behind one small protocol.

To plug in a new adapter (the web page, Slack, Discord), write a class with the attributes and
methods of :class:`AdapterUnderTest` and add a factory for it to ``ADAPTERS`` in
``test_adapter_contract.py``:

- ``name``; ``network`` (True: it has allow-lists, and ``stranger`` is refused); ``crash_safe``
  (True: it must pass the kill -9 exactly-once case); ``limit`` (the platform's message length);
- ``conversation(channel, user)``: the journal conversation a user's message in ``channel`` goes to;
- ``start()`` (returns once the adapter follows the journal), ``kill()`` (SIGKILL; nothing when it
  is already dead), ``stop()``, ``alive()``;
- ``say(channel, user, text, attachments)``, ``press(channel, user, action)``: what a user does;
- ``messages()``: what the platform shows now, in order, as :class:`Shown` (text after its last
  edit, its buttons' actions, whether it is final), counted on the platform's side (the page's DOM,
  the fake platform's record, what the console printed).

Users: ``ann`` is allowed and an admin, ``bob`` allowed, ``stranger`` not allowed anywhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

ROOT = Path(__file__).resolve().parents[2]
FAKE_PLATFORM = Path(__file__).resolve().parent / "fake_platform.py"


@dataclass(frozen=True)
class Shown:
    """One message as the platform shows it."""

    channel: str
    text: str
    actions: tuple[str, ...] = ()
    final: bool = True


class AdapterUnderTest(Protocol):
    """See the module docstring."""

    name: str
    network: bool
    crash_safe: bool
    limit: int | None
    journal: Path

    def conversation(self, channel: str, user: str) -> str: ...
    async def start(self) -> None: ...
    async def kill(self) -> None: ...
    def alive(self) -> bool: ...
    async def stop(self) -> None: ...
    async def say(self, channel: str, user: str, text: str, attachments: tuple[dict[str, str], ...] = ()) -> None: ...
    async def press(self, channel: str, user: str, action: str) -> None: ...
    async def messages(self) -> list[Shown]: ...


async def _end(process: asyncio.subprocess.Process | None, sig: int) -> None:
    if process is None or process.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(sig)
    async with asyncio.timeout(15):
        await process.wait()


class FakeAdapter:
    """The kit's runner on the recording fake platform (``fake_platform.py``) in its own process."""

    name = "fake"
    network = True
    crash_safe = True

    def __init__(
        self,
        folder: Path,
        limit: int = 300,
        edit_interval: float = 0.2,
        rate_limit_every: int = 0,
        *,
        chaos: float = 0.0,
        render: str = "verbose",
    ) -> None:
        self.chaos = chaos
        self.render = render
        self.folder = folder
        self.journal = folder / "journal.jsonl"
        self.record = folder / "platform-record.jsonl"
        self.inbox = folder / "inbox.jsonl"
        self.limit = limit
        self.edit_interval = edit_interval
        self.rate_limit_every = rate_limit_every
        self.process: asyncio.subprocess.Process | None = None
        self.stderr = folder / "adapter.log"

    def conversation(self, channel: str, user: str) -> str:
        return f"fake:/{channel}/"

    async def start(self) -> None:
        """Start the process; returns once its runner follows the journal (or it killed itself meanwhile)."""
        self.inbox.touch()
        offset = self.stderr.stat().st_size if self.stderr.exists() else 0
        with self.stderr.open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable,
                str(FAKE_PLATFORM),
                "--journal",
                str(self.journal),
                "--record",
                str(self.record),
                "--inbox",
                str(self.inbox),
                "--allow",
                "ann",
                "--allow",
                "bob",
                "--admin",
                "ann",
                "--limit",
                str(self.limit),
                "--edit-interval",
                str(self.edit_interval),
                "--rate-limit-every",
                str(self.rate_limit_every),
                "--chaos",
                str(self.chaos),
                "--render",
                self.render,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=log,
                cwd=ROOT,
            )
        async with asyncio.timeout(60):
            while "follows the journal" not in self.stderr.read_bytes()[offset:].decode(errors="replace"):
                if self.process.returncode is not None:
                    assert self.process.returncode == -signal.SIGKILL, self.stderr.read_text()
                    return  # killed by its own chaos while starting; the test starts it again
                await asyncio.sleep(0.05)

    async def kill(self) -> None:
        await _end(self.process, signal.SIGKILL)

    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.send_event({"type": "quit", "channel": "-", "user": "-"})
            try:
                async with asyncio.timeout(15):
                    await self.process.wait()
            finally:
                await _end(self.process, signal.SIGKILL)
        assert self.process is None or self.process.returncode in (0, -signal.SIGKILL), self.stderr.read_text()

    def send_event(self, event: dict[str, object]) -> None:
        with self.inbox.open("a") as inbox:
            inbox.write(json.dumps(event) + "\n")

    async def say(self, channel: str, user: str, text: str, attachments: tuple[dict[str, str], ...] = ()) -> None:
        self.send_event(
            {"type": "message", "channel": channel, "user": user, "text": text, "attachments": list(attachments)}
        )

    async def press(self, channel: str, user: str, action: str) -> None:
        self.send_event({"type": "press", "channel": channel, "user": user, "action": action})

    def operations(self) -> list[dict[str, object]]:
        """The platform's raw record: every post, edit, delete and typing change."""
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines() if line.endswith("}")]

    async def messages(self) -> list[Shown]:
        shown: dict[str, Shown] = {}
        for op in self.operations():
            if op["op"] == "post":
                shown[str(op["id"])] = Shown(
                    str(op["channel"]),
                    str(op["text"]),
                    _actions(op["buttons"]),
                    bool(op["final"]),
                )
            elif op["op"] == "edit":
                old = shown[str(op["id"])]
                actions = _actions(op["buttons"])
                shown[str(op["id"])] = Shown(old.channel, str(op["text"]), actions, bool(op["final"]))
            elif op["op"] == "delete":
                shown.pop(str(op["id"]), None)
        return list(shown.values())


def _actions(buttons: object) -> tuple[str, ...]:
    """The actions of the fake platform's recorded buttons (``[label, action]`` pairs)."""
    assert isinstance(buttons, list)
    return tuple(str(button[1]) for button in buttons)


class ConsoleAdapter:
    """``coven-codex chat`` in its own process: stdin is the keyboard, what it prints is the platform."""

    name = "console"
    network = False
    crash_safe = False
    limit = None

    def __init__(self, folder: Path, channel: str = "general") -> None:
        self.folder = folder
        self.journal = folder / "journal.jsonl"
        self.channel = channel
        self.process: asyncio.subprocess.Process | None = None
        self.printed = ""
        self._reader: asyncio.Task[None] | None = None

    def conversation(self, channel: str, user: str) -> str:
        return channel

    async def start(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            str(ROOT / ".venv" / "bin" / "coven-codex"),
            "chat",
            "--journal",
            str(self.journal),
            "--conversation",
            self.channel,
            "--sender",
            "ann",
            "--no-colour",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self._reader = asyncio.create_task(self._read())
        async with asyncio.timeout(20):
            while "/help for commands" not in self.printed:
                await asyncio.sleep(0.05)

    async def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        while chunk := await self.process.stdout.read(4096):
            self.printed += chunk.decode()

    async def kill(self) -> None:
        await _end(self.process, signal.SIGKILL)
        if self._reader is not None:
            await self._reader

    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            assert self.process.stdin is not None
            self.process.stdin.write(b"/quit\n")
            with contextlib.suppress(ConnectionError):
                await self.process.stdin.drain()
            try:
                async with asyncio.timeout(15):
                    await self.process.wait()
            finally:
                await _end(self.process, signal.SIGKILL)
            assert self.process.returncode == 0, self.printed
        if self._reader is not None:
            await self._reader

    async def say(self, channel: str, user: str, text: str, attachments: tuple[dict[str, str], ...] = ()) -> None:
        assert channel == self.channel and self.process is not None and self.process.stdin is not None
        for attachment in attachments:
            text = f"/attach {attachment['url']} {text}"
        self.process.stdin.write(text.encode() + b"\n")
        await self.process.stdin.drain()

    async def press(self, channel: str, user: str, action: str) -> None:
        await self.say(channel, user, "/" + action)

    async def messages(self) -> list[Shown]:
        lines = [line.removeprefix("you> ") for line in self.printed.split("\n")]
        return [Shown(self.channel, line, _console_actions(line)) for line in lines if line.strip()]


def _console_actions(line: str) -> tuple[str, ...]:
    if "approval needed [" not in line:
        return ()
    request = line.split("approval needed [", 1)[1].split("]", 1)[0]
    return (f"approve {request}", f"deny {request}")
