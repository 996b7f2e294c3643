"""``coven-codex chat``: the console chat adapter."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import os
import sys
from pathlib import Path

from coven_codex.adapters.console import ConsoleChat, stdin_lines
from coven_codex.adapters.kit.render import RenderMode
from coven_codex.cli.options import JOURNAL_METAVAR, journal_argument
from coven_codex.entries import DEFAULT_CONVERSATION
from coven_codex.journal import JournalError
from coven_codex.journal.opening import JournalName, connected, open_journal

HELP = "chat with Codex in this terminal through a journal (the daemon must be running on it)"


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``chat`` command's options to ``parser``."""
    parser.add_argument(
        "--journal",
        type=journal_argument,
        metavar=JOURNAL_METAVAR,
        required=True,
        help="the journal the daemon follows (a file, or redis://...)",
    )
    parser.add_argument(
        "--conversation", default=DEFAULT_CONVERSATION, help=f"conversation to join (default {DEFAULT_CONVERSATION!r})"
    )
    parser.add_argument("--sender", default=None, help="your name in the journal (default: your login name)")
    parser.add_argument("--history", type=int, default=50, help="entries of history shown on start (default 50)")
    parser.add_argument(
        "--no-colour", "--no-color", dest="colour", action="store_false", help="plain text even on a terminal"
    )
    parser.add_argument(
        "--render",
        choices=[mode.value for mode in RenderMode],
        default=RenderMode.VERBOSE.value,
        help="verbose: every step as it happens (default); quiet: one progress card per turn, then the reply",
    )


def execute(args: argparse.Namespace) -> int:
    """Run ``coven-codex chat`` (the console chat on the journal); returns the exit code, 2 for bad options."""
    journal_path: JournalName = args.journal
    if isinstance(journal_path, Path) and not journal_path.parent.is_dir():
        print(
            f"coven-codex chat: the journal's folder {journal_path.parent} does not exist; "
            "create it or pass the --journal the daemon uses",
            file=sys.stderr,
        )
        return 2
    if args.history < 0:
        print("coven-codex chat: --history must be 0 or more", file=sys.stderr)
        return 2
    if isinstance(journal_path, Path) and not journal_path.exists():  # `coven-codex run` creates its journal
        print(
            f"coven-codex chat: {journal_path} does not exist yet, so no daemon serves it; start "
            f"`coven-codex run --journal {journal_path}` (what you type waits for it)",
            file=sys.stderr,
        )
    sender = args.sender or _login_name()
    colour = bool(args.colour and sys.stdout.isatty() and os.environ.get("NO_COLOR") is None)
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(
            _chat(journal_path, args.conversation, sender, colour, args.history, render=RenderMode(args.render))
        )
    return 0


def _login_name() -> str:
    try:
        return getpass.getuser()
    except OSError:
        return "user"


async def _chat(
    path: JournalName, conversation: str, sender: str, colour: bool, history: int, *, render: RenderMode
) -> int:
    """Chat until stdin ends; 1 when the journal cannot be opened (the message says what to fix)."""
    try:
        journal = await connected(open_journal(path))
    except JournalError as exc:
        print(f"coven-codex chat: {exc}", file=sys.stderr)
        return 1
    try:
        prompt = sys.stdin.isatty() and sys.stdout.isatty()
        chat = ConsoleChat(
            journal, conversation, sender, sys.stdout, colour=colour, history=history, prompt=prompt, render=render
        )
        await chat.run(stdin_lines())
    finally:
        await journal.aclose()
    return 0
