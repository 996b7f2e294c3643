"""Running the demo: one asyncio program hosting the scripted model server, the daemon and the chat.

Everything the demo writes lives in one folder (default ``./.demo``): the workspace Codex works
in, its isolated ``CODEX_HOME``, the journal and the daemon's log. Nothing needs an OpenAI
account: Codex talks to the scripted model server on 127.0.0.1.

Interactive mode runs the console chat on the terminal. Script mode (``thoughts`` given) sends
each thought in turn, waits until its turn has ended, prints the conversation and returns
whether every thought got a reply that used a spell or text.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from coven_codex.adapters.console import ConsoleChat, stdin_lines
from coven_codex.adapters.kit.render import PlainDialect, RenderOptions, format_block, render_entry
from coven_codex.codex.installed import project_codex
from coven_codex.daemon.bootstrap import BootstrapError, run_daemon
from coven_codex.demo.model import demo_responder
from coven_codex.entries import BaseEntry, ErrorEntry, ResponseEntry, StatusEntry, ThoughtEntry, ToolResultEntry
from coven_codex.journal import FileJournal, JournalRecord
from coven_codex.settings import Settings
from coven_codex.testing.codex_config import DEFAULT_ENV_KEY, codex_config
from coven_codex.testing.model_server import ScriptedModelServer

log = logging.getLogger(__name__)

CONVERSATION = "demo"
TURN_END_STATES = frozenset({"turn_completed", "turn_failed", "turn_aborted"})
DEFAULT_SCRIPT = ("hello!", "What is 2 plus 3?", "roll 2 dice")


class DemoError(RuntimeError):
    """The demo cannot run; the message says what to do."""


@dataclass(frozen=True, slots=True)
class DemoOptions:
    """What ``coven-codex demo`` was asked for; ``thoughts`` is ``None`` for interactive mode."""

    folder: Path
    codex_path: str | None
    thoughts: Sequence[str] | None  # None: interactive
    turn_timeout: float = 120.0
    driver: str = "auto"


def _settings(options: DemoOptions, base_url: str) -> Settings:
    folder = options.folder.resolve()
    return Settings.model_validate(
        {
            "workspace": folder / "workspace",
            "journal": folder / "journal.jsonl",
            "codex_path": options.codex_path or _project_codex(),
            "codex_home": folder / "codex-home",
            "state_dir": folder / "state",
            "spells": ["coven_codex.demo.spells:spells"],
            "codex": codex_config(base_url, stream_idle_timeout_ms=60_000),
            "driver": options.driver,
            "approval_policy": "approve",
            "restart_backoff": 0.5,
        }
    )


def _project_codex() -> str | None:
    found = project_codex()
    return None if found is None else str(found)


def _log_to_file(path: Path) -> logging.Handler:
    """Send every log record to ``path`` only (the terminal belongs to the chat)."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    return handler


async def run_demo(options: DemoOptions, out: TextIO) -> bool:
    """Run the model server, daemon and chat in one event loop; ``False`` if a scripted thought got no reply."""
    folder = options.folder.resolve()
    (folder / "workspace").mkdir(parents=True, exist_ok=True)
    _log_to_file(folder / "daemon.log")
    environ = {**os.environ, DEFAULT_ENV_KEY: "offline-demo"}
    async with ScriptedModelServer(responder=demo_responder) as server:
        settings = _settings(options, server.base_url)
        assert settings.journal is not None
        stop = asyncio.Event()
        ready = asyncio.Event()
        daemon_failed: list[BaseException] = []

        async def daemon() -> None:
            try:
                await run_daemon(settings, stop, ready=ready.set, environ=environ)
            except BootstrapError as exc:
                daemon_failed.append(exc)
                ready.set()

        out.write(f"coven-codex demo: files in {folder} (daemon log: {folder / 'daemon.log'})\n")
        out.flush()
        ok = False
        async with asyncio.TaskGroup() as group:
            daemon_task = group.create_task(daemon())
            await ready.wait()
            if not daemon_failed:
                journal = FileJournal(Path(settings.journal))
                try:
                    if options.thoughts is None:
                        await _interactive(journal, out)
                        ok = True
                    else:
                        ok = await _scripted(journal, options.thoughts, options.turn_timeout, out)
                finally:
                    await journal.aclose()
                    stop.set()
            await daemon_task
    if daemon_failed:
        raise DemoError(f"the daemon could not start: {daemon_failed[0]}")
    return ok


async def _interactive(journal: FileJournal, out: TextIO) -> None:
    colour = out.isatty() and os.environ.get("NO_COLOR") is None
    out.write("Try: what is 2 plus 3?   roll 3 dice   count the words in the quick brown fox\n(/quit to leave)\n")
    prompt = out.isatty() and sys.stdin.isatty()
    chat = ConsoleChat(
        journal,
        CONVERSATION,
        "you",
        out,
        colour=colour,
        prompt=prompt,
        quit_note="leave (this stops the demo's daemon too)",
    )
    await chat.run(stdin_lines())


async def _scripted(journal: FileJournal, thoughts: Sequence[str], turn_timeout: float, out: TextIO) -> bool:
    """Send each thought, wait for its turn to end, print everything; True if all got replies."""
    position = await journal.end_position()
    tail = journal.tail(position)
    all_answered = True
    try:
        for text in thoughts:
            await journal.append(ThoughtEntry(text=text, conversation=CONVERSATION, sender="you"))
            answered = False
            try:
                async with asyncio.timeout(turn_timeout):
                    async for item in tail:
                        if not isinstance(item, JournalRecord) or item.entry.conversation != CONVERSATION:
                            continue
                        entry = item.entry
                        _print(entry, out)
                        answered = answered or isinstance(entry, ResponseEntry | ToolResultEntry)
                        if _turn_over(entry):
                            break
            except TimeoutError:
                out.write(f"  [no end of turn within {turn_timeout:g} s]\n")
            all_answered = all_answered and answered
    finally:
        close = getattr(tail, "aclose", None)  # the file journal's tail is an async generator
        if close is not None:
            await close()
    return all_answered


def _turn_over(entry: BaseEntry) -> bool:
    return (isinstance(entry, StatusEntry) and entry.state in TURN_END_STATES) or isinstance(entry, ErrorEntry)


SCRIPT_RENDER = RenderOptions(show_reasoning=True, show_status=True, show_thoughts=True)


def _print(entry: BaseEntry, out: TextIO) -> None:
    block = render_entry(entry, SCRIPT_RENDER)
    if block is not None:
        for text in format_block(block, PlainDialect()):
            out.write(text + "\n")
        out.flush()


def main_demo(options: DemoOptions) -> int:
    """Run the demo; returns the exit code (0 ok, 1 failed, 130 on Ctrl-C)."""
    try:
        ok = asyncio.run(run_demo(options, sys.stdout))
    except KeyboardInterrupt:
        print("\ncoven-codex demo: stopped (Ctrl-C)", file=sys.stderr)
        return 130
    except DemoError as exc:
        print(f"coven-codex demo: {exc}", file=sys.stderr)
        return 1
    return 0 if ok else 1
