"""``coven-codex``: the command line (docs/configuration.md).

Each subcommand lives in its own module ``coven_codex.cli.<name>`` (``-`` in the name
becomes ``_``) exposing ``HELP: str``, ``configure(parser)`` and ``execute(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence
from types import ModuleType

from coven_codex import __version__

SUBCOMMANDS: tuple[str, ...] = (
    "run",
    "exec",
    "validate",
    "chat",
    "web",
    "discord",
    "telegram",
    "slack",
    "demo",
    "spells",
    "job",
    "mcp-serve",
    "journal",
    "webhooks",
    "model-server",
)
"""In ``--help`` order; each module's ``HELP`` is its summary there."""


def _load(name: str) -> ModuleType:
    return importlib.import_module(f"coven_codex.cli.{name.replace('-', '_')}")


def build_parser(only: str | None = None) -> tuple[argparse.ArgumentParser, dict[str, ModuleType]]:
    """The ``coven-codex`` parser with every subcommand (or ``only`` that one), and each subcommand's
    module by name."""
    parser = argparse.ArgumentParser(
        prog="coven-codex",
        description="Bridge a chat journal and the OpenAI Codex CLI, both ways.",
    )
    parser.add_argument("--version", action="version", version=f"coven-codex {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    for where, default in ((parser, None), (common, argparse.SUPPRESS)):
        # accepted before and after the subcommand; after it, an absent flag keeps the value from before
        where.add_argument(
            "--log-level",
            default=default,
            choices=["DEBUG", "INFO", "WARNING", "ERROR"],
            help="logging threshold for the log on stderr (default: INFO for run, WARNING otherwise)",
        )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules: dict[str, ModuleType] = {}
    for name in SUBCOMMANDS if only is None else (only,):
        module = _load(name)
        modules[name] = module
        sub_parser = sub.add_parser(name, help=module.HELP, description=module.HELP, parents=[common])
        module.configure(sub_parser)
    return parser, modules


def _named_command(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names before any other word, if it names one (``--log-level X`` skipped)."""
    words = iter(argv)
    for word in words:
        if word == "--log-level":
            next(words, None)
        elif not word.startswith("-"):
            return word if word in SUBCOMMANDS else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``coven-codex`` with ``argv`` (default: the process's arguments); the exit status.

    A command line naming its subcommand imports that subcommand's module only (``mcp-serve``
    starts faster so); ``--help`` and a bad command build the whole parser."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    command = _named_command(arguments)
    if command == "run":
        # Before the daemon's modules are imported: a stop during start-up exits 0 too (cli/stopping.py).
        from coven_codex.cli.stopping import STOP  # noqa: PLC0415 (only for run)

        STOP.install()
    parser, modules = build_parser(only=command)
    args = parser.parse_args(arguments)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    logging.basicConfig(
        level=getattr(logging, args.log_level or ("INFO" if args.command == "run" else "WARNING")),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    result: int = modules[args.command].execute(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
