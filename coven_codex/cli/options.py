"""Command-line options shared by several subcommands, defined once so they behave the same."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from coven_codex.adapters.kit.config import AdapterConfigError, AdapterSection
from coven_codex.adapters.kit.platform import PlatformError
from coven_codex.cli.stopping import signals_cancel
from coven_codex.journal.opening import JournalName, is_redis_name, journal_name
from coven_codex.settings import load_adapter_section
from coven_codex.support.secret import Secret

SPELLS_HELP = "spell source MODULE:OBJECT (repeatable; replaces the `spells` list of coven.toml)"


def add_spells_option(parser: argparse.ArgumentParser, help_text: str = SPELLS_HELP) -> None:
    """``--spells``: repeatable and accumulating (``--spells a --spells b c`` gives ``[a, b, c]``)."""
    parser.add_argument("--spells", action="extend", nargs="+", default=None, metavar="MODULE:OBJECT", help=help_text)


JOURNAL_METAVAR = "PATH|redis://HOST:PORT/DB?key=NAME"


def journal_argument(text: str) -> JournalName:
    """``--journal``: a file path, or a Redis journal's URL (docs/journal-protocol.md)."""
    return journal_name(text)


def add_adapter_options(parser: argparse.ArgumentParser, name: str) -> None:
    """A chat adapter command's ``--config`` (required) and ``--journal``."""
    parser.add_argument("--config", type=Path, required=True, help=f"coven.toml with an [adapters.{name}] section")
    parser.add_argument(
        "--journal",
        type=journal_argument,
        metavar=JOURNAL_METAVAR,
        default=None,
        help="the journal (default: the one coven.toml names)",
    )


def adapter_refused(name: str, message: str) -> int:
    """Say why the ``name`` adapter cannot start (``coven-codex NAME: ...`` on stderr); exit code 2."""
    print(f"coven-codex {name}: {message}", file=sys.stderr)
    return 2


def run_adapter(name: str, adapter: Callable[[], Awaitable[None]]) -> int:
    """Run the ``name`` adapter (``adapter()``) until SIGINT or SIGTERM cancel it (exit code 0); a
    :class:`PlatformError` it ends with is said on stderr (exit code 1)."""

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        async with signals_cancel(task):
            await adapter()

    try:
        asyncio.run(main())
    except asyncio.CancelledError:
        return 0
    except PlatformError as exc:
        print(f"coven-codex {name}: {exc}", file=sys.stderr)
        return 1
    return 0


def load_adapter_start(
    name: str, config: Path, journal: JournalName | None, ids_hint: str
) -> tuple[AdapterSection, JournalName, dict[str, Secret]]:
    """What a chat adapter command needs before it connects: its ``[adapters.<name>]`` section,
    the journal (``journal`` wins over the file's), and its secrets from the environment or files.
    Raises :class:`AdapterConfigError` saying what to fix (``ids_hint``: where the platform shows
    the ids an empty or wrong allow-list needs)."""
    section, configured = load_adapter_section(name, config)
    journal = journal or configured
    if journal is None:
        raise AdapterConfigError(
            f"no journal: set journal = ... in {config} (or in [adapters.{name}]), or pass --journal"
        )
    if not is_redis_name(journal) and not Path(journal).parent.is_dir():
        raise AdapterConfigError(
            f"the journal's folder {Path(journal).parent} does not exist; create it or fix the journal setting"
        )
    problems = section.access_problems()
    if problems:
        raise AdapterConfigError("; ".join(problems) + f" ({ids_hint})")
    return section, journal, section.load_secrets(dict(os.environ))
