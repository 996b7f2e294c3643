"""``coven-codex journal``: append to, read, follow and compact a journal, and list its cursors.

For shell adapters, operators and debugging, on every backend :func:`~coven_codex.journal.opening.open_journal`
knows (a path is the file journal). Positions are printed and accepted in their text form
(``123`` or ``3-120``); docs/journal-protocol.md, *The journal command*.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TextIO

from coven_codex.entries import EntryError, parse_entry
from coven_codex.journal import START, BadLine, Journal, JournalError, JournalItem, JournalRecord, Position
from coven_codex.journal.file import FileJournal
from coven_codex.journal.opening import CursorListing, JournalOptions, open_journal
from coven_codex.settings import SettingsError, load_settings

HELP = "append to, read, follow or compact a journal, and list its cursors (any backend)"

ACTIONS = ("append", "tail", "read", "cursors", "compact")
TEXT_LIMIT = 200
"""Characters of an entry's text shown per line without ``--json``."""


class UsageError(Exception):
    """A mistake in the command line; exit status 2."""


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(  # also after the action; absent, the value given before it stands
        "--log-level",
        default=argparse.SUPPRESS,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="logging threshold",
    )
    parser.add_argument(
        "--journal",
        default=None,
        help="the journal: a file path, or a URL of another backend (default: `journal` of --config)",
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help="coven.toml to take the journal and its segment settings from",
    )


def _add_selection(parser: argparse.ArgumentParser, *, default: str) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--from-start", action="store_true", help="from the oldest entry the journal holds")
    where.add_argument("--from", dest="from_position", metavar="POSITION", help="from this position (as printed)")
    parser.add_argument("--conversation", default=None, help="only the entries of this conversation")
    parser.add_argument(
        "--json",
        action="store_true",
        help='one JSON object per line: {"start": P, "end": P, "entry": {...}} (or "bad_line" for a bad line)',
    )
    parser.set_defaults(default_start=default)


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``journal`` command's actions and options to ``parser``."""
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    append = sub.add_parser("append", help="append one entry; prints its id and position")
    _add_common(append)
    append.add_argument(
        "--json",
        dest="entry",
        required=True,
        metavar="ENTRY",
        help="the entry as a JSON object ('-': one per stdin line)",
    )
    tail = sub.add_parser("tail", help="follow the journal, printing entries as they come (Ctrl-C stops)")
    _add_common(tail)
    _add_selection(tail, default="end")
    read = sub.add_parser("read", help="print the entries between two positions, then exit")
    _add_common(read)
    _add_selection(read, default="start")
    read.add_argument("--to", dest="to_position", metavar="POSITION", help="up to this position (default: the end)")
    cursors = sub.add_parser("cursors", help="list the saved cursors, or show one")
    _add_common(cursors)
    cursors.add_argument("what", nargs="?", choices=["list", "show"], default="list", help="list (default) or show")
    cursors.add_argument("name", nargs="?", help="the cursor to show")
    cursors.add_argument("--json", action="store_true", help="as JSON")
    compact = sub.add_parser("compact", help="archive or delete the segments every saved cursor has passed")
    _add_common(compact)
    how = compact.add_mutually_exclusive_group()
    how.add_argument("--archive", type=Path, default=None, help="move them to this folder (default <journal>.archive/)")
    how.add_argument("--delete", action="store_true", help="delete them instead of archiving them")
    compact.add_argument("--dry-run", action="store_true", help="only say what would be removed")


def execute(args: argparse.Namespace) -> int:
    """Run ``coven-codex journal ACTION``; 0 on success, 1 when the journal refused, 2 for bad options."""
    try:
        name, options = _journal_name(args)
        return asyncio.run(_run(args, name, options))
    except KeyboardInterrupt:
        return 0
    except UsageError as exc:
        print(f"coven-codex journal {args.action}: {exc}", file=sys.stderr)
        return 2
    except JournalError as exc:
        print(f"coven-codex journal {args.action}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        with contextlib.suppress(OSError):
            sys.stdout.close()
        return 0


def _journal_name(args: argparse.Namespace) -> tuple[str, JournalOptions]:
    options = JournalOptions()
    name: str | None = args.journal
    if args.config is not None:
        try:
            settings = load_settings(args.config)
        except SettingsError as exc:
            raise UsageError(str(exc)) from None
        options = JournalOptions(
            durability=settings.durability,
            segment_bytes=settings.journal_segment_bytes,
            segment_age=settings.journal_segment_age,
            retention=settings.journal_retention,
            archive=settings.journal_archive,
        )
        if name is None and settings.journal is not None:
            name = str(settings.journal)
    if not name:
        raise UsageError("which journal? pass --journal PATH_OR_URL (or --config with a `journal` setting)")
    return name, options


def _position(text: str | None, option: str) -> Position | None:
    if text is None:
        return None
    try:
        return Position.parse(text)
    except JournalError as exc:
        raise UsageError(f"{option}: {exc}") from None


async def _run(args: argparse.Namespace, name: str, options: JournalOptions) -> int:
    journal = open_journal(name, options)
    try:
        actions: dict[str, Callable[[argparse.Namespace, Journal], Awaitable[int]]] = {
            "append": _append,
            "tail": _tail,
            "read": _read,
            "cursors": _cursors,
            "compact": _compact,
        }
        return await actions[args.action](args, journal)
    finally:
        await journal.aclose()


async def _append(args: argparse.Namespace, journal: Journal) -> int:
    texts = sys.stdin if args.entry == "-" else [args.entry]
    for number, text in enumerate(texts, 1):
        if not text.strip():
            continue
        try:
            entry = parse_entry(json.loads(text))
        except (ValueError, EntryError) as exc:
            where = f"stdin line {number}" if args.entry == "-" else "--json"
            raise UsageError(f"{where} is not a journal entry: {str(exc)[:TEXT_LIMIT]}") from None
        record = await journal.append(entry)
        print(f"{record.entry.id} {record.start}", flush=True)
    return 0


def _start(args: argparse.Namespace) -> Position | None:
    """Where to start; None: at the journal's end."""
    chosen = _position(args.from_position, "--from")
    if chosen is not None:
        return chosen
    if args.from_start or args.default_start == "start":
        return START
    return None


def show(item: JournalItem, *, as_json: bool, out: TextIO) -> None:
    """Print one item: a JSON object, or ``POSITION  conversation  sender/kind: text``."""
    if as_json:
        value: dict[str, object] = {"start": str(item.start), "end": str(item.end)}
        if isinstance(item, BadLine):
            value["bad_line"] = item.reason
        else:
            value["entry"] = json.loads(item.entry.to_json())
        out.write(json.dumps(value, ensure_ascii=False) + "\n")
    elif isinstance(item, BadLine):
        out.write(f"{item.start}  (bad line: {item.reason})\n")
    else:
        entry = item.entry
        text = " ".join(entry.text.split())
        if len(text) > TEXT_LIMIT:
            text = text[: TEXT_LIMIT - 1] + "…"
        out.write(f"{item.start}  {entry.conversation}  {entry.sender}/{entry.kind}: {text}\n")
    out.flush()


def _wanted(item: JournalItem, conversation: str | None) -> bool:
    return conversation is None or (isinstance(item, JournalRecord) and item.entry.conversation == conversation)


async def _tail(args: argparse.Namespace, journal: Journal) -> int:
    start = _start(args)
    if start is None:
        start = await journal.end_position()
    async for item in journal.tail(start):
        if _wanted(item, args.conversation):
            show(item, as_json=args.json, out=sys.stdout)
    return 0


async def _read(args: argparse.Namespace, journal: Journal) -> int:
    start = _start(args)
    end = _position(args.to_position, "--to")
    if start is None:
        start = await journal.end_position()
    if end is not None and end < start:
        raise UsageError(f"--to {end} lies before the start {start}")
    for item in await journal.read(start, end):
        if _wanted(item, args.conversation):
            show(item, as_json=args.json, out=sys.stdout)
    return 0


async def _cursors(args: argparse.Namespace, journal: Journal) -> int:
    if args.what == "show":
        if not args.name:
            raise UsageError("which cursor? `journal cursors show NAME`")
        position = await journal.load_cursor(args.name)
        if position is None:
            print(f"coven-codex journal cursors: no cursor named {args.name!r}", file=sys.stderr)
            return 1
        print(json.dumps({"name": args.name, "position": str(position)}) if args.json else str(position))
        return 0
    if args.name:
        raise UsageError(f"`cursors list` takes no name; to see one: `journal cursors show {args.name}`")
    if not isinstance(journal, CursorListing):
        raise JournalError(f"this journal's backend ({type(journal).__name__}) cannot list its cursors")
    cursors = await journal.cursors()
    if args.json:
        print(json.dumps({name: str(position) for name, position in sorted(cursors.items())}))
    else:
        for name, position in sorted(cursors.items()):
            print(f"{position}\t{name}")
    return 0


async def _compact(args: argparse.Namespace, journal: Journal) -> int:
    if isinstance(journal, FileJournal):
        report = await journal.compact(
            action="delete" if args.delete else "archive", archive=args.archive, dry_run=args.dry_run
        )
        print(report.message)
        return 0
    from coven_codex.journal.redis import RedisJournal  # noqa: PLC0415 (the optional [redis] extra)

    if not isinstance(journal, RedisJournal):
        raise JournalError(f"this journal's backend ({type(journal).__name__}) cannot compact")
    if args.dry_run or args.archive is not None:
        raise UsageError("a Redis journal is trimmed in place (XTRIM): --dry-run and --archive are for file journals")
    trimmed = await journal.compact()
    print(f"removed {trimmed.removed} entr{'y' if trimmed.removed == 1 else 'ies'}: {trimmed.reason}")
    return 0
