"""``coven-codex``: the command line (DESIGN §3).

Each subcommand lives in its own module ``coven_codex.cli.<name>`` exposing
``HELP: str``, ``configure(parser)`` and ``execute(args) -> int``. A subcommand
whose module is not there yet says so and exits 2 rather than pretending.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence
from types import ModuleType

from coven_codex import __version__

SUBCOMMANDS: tuple[tuple[str, str], ...] = (
    ("run", "run the daemon: bridge a chat journal and Codex"),
    ("validate", "check the environment and say exactly what to fix"),
    ("chat", "a console chat adapter on a journal"),
    ("web", "the web chat page on a journal"),
    ("discord", "the Discord chat adapter on a journal"),
    ("demo", "the whole thing offline: daemon, real Codex CLI, scripted model, console chat"),
    ("spells", "list the spells (Python functions) Codex will see as tools"),
)


def _load(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"coven_codex.cli.{name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"coven_codex.cli.{name}":
            return None
        raise


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, ModuleType | None]]:
    parser = argparse.ArgumentParser(
        prog="coven-codex",
        description="Bridge a chat journal and the OpenAI Codex CLI, both ways.",
    )
    parser.add_argument("--version", action="version", version=f"coven-codex {__version__}")
    parser.add_argument(
        "--log-level",
        default=None,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="logging threshold for the log on stderr (default: INFO for run, WARNING otherwise)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules: dict[str, ModuleType | None] = {}
    for name, summary in SUBCOMMANDS:
        module = _load(name)
        modules[name] = module
        help_text = getattr(module, "HELP", summary) if module else f"{summary} (not implemented yet)"
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        if module is not None:
            module.configure(sub_parser)
    return parser, modules


def main(argv: Sequence[str] | None = None) -> int:
    parser, modules = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    logging.basicConfig(
        level=getattr(logging, args.log_level or ("INFO" if args.command == "run" else "WARNING")),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    module = modules[args.command]
    if module is None:
        print(f"coven-codex {args.command}: not implemented yet in this version", file=sys.stderr)
        return 2
    result: int = module.execute(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
