"""``coven-codex demo``: the whole thing offline, no OpenAI account needed."""

from __future__ import annotations

import argparse
from pathlib import Path

from coven_codex.demo.runner import DEFAULT_SCRIPT, DemoOptions, main_demo

HELP = (
    "the whole thing offline: the daemon, the real Codex CLI, a scripted model server and the "
    "console chat, with spells Codex calls"
)


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``demo`` command's options to ``parser``."""
    parser.add_argument(
        "--dir",
        type=Path,
        default=Path(".demo"),
        help="folder for the demo's workspace, journal and log (default ./.demo)",
    )
    parser.add_argument(
        "--codex-path",
        dest="codex_path",
        help="Codex executable (default: the pinned CLI scripts/setup.sh installed, else PATH)",
    )
    parser.add_argument(
        "--driver",
        choices=["auto", "app-server", "exec"],
        default="auto",
        help="how thoughts reach Codex (default: chosen by Codex's version)",
    )
    parser.add_argument(
        "--script",
        nargs="*",
        metavar="THOUGHT",
        help="non-interactive: send these thoughts (default: a short built-in script), "
        "print the conversation, exit 0 if each got a reply",
    )
    parser.add_argument(
        "--turn-timeout", type=float, default=120.0, help="script mode: seconds to wait for each turn (default 120)"
    )


def execute(args: argparse.Namespace) -> int:
    """Run ``coven-codex demo``, interactive or scripted (``--script``); returns the exit code."""
    thoughts = None if args.script is None else (args.script or list(DEFAULT_SCRIPT))
    return main_demo(
        DemoOptions(
            folder=args.dir,
            codex_path=args.codex_path,
            thoughts=thoughts,
            turn_timeout=args.turn_timeout,
            driver=args.driver,
        )
    )
