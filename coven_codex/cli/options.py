"""Command-line options shared by several subcommands, defined once so they behave the same."""

from __future__ import annotations

import argparse

SPELLS_HELP = "spell source MODULE:OBJECT (repeatable; replaces the `spells` list of coven.toml)"


def add_spells_option(parser: argparse.ArgumentParser, help_text: str = SPELLS_HELP) -> None:
    """``--spells``: repeatable and accumulating (``--spells a --spells b c`` gives ``[a, b, c]``)."""
    parser.add_argument("--spells", action="extend", nargs="+", default=None, metavar="MODULE:OBJECT", help=help_text)
