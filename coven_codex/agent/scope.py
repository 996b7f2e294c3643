"""Conversation state per journal: ``<state_dir>/journals/<journal identity>/``.

The state directory is the workspace's (the process record, the lock, ``codex-home``, the
capability cache); what belongs to a *conversation* (its Codex thread, in-flight record, replay
window, delivered ids: :class:`~coven_codex.agent.state.SessionState`) lives in the folder of the
journal it came from, named by the journal's identity (:mod:`coven_codex.journal.identity`). A
daemon started on a journal it never served finds that folder empty and starts every
conversation afresh; the same journal finds its own. The folder records which journal it serves
(``journal.json``).

**State from an older coven-codex** (``<state_dir>/sessions/``, one set for every journal the
workspace was used with) moves once, on the first start on each journal: the older state does
not say which journal it served, so each conversation is matched by the newest thought it handed
to Codex (its in-flight thought, else ``reply_to``, else the newest entry it wrote itself); the
conversations whose thought is in this journal (or in the file a rotation by hand left beside it,
not finished yet) move to its folder. The ones that are not in it
stay where they are, for the journal they served. When this journal was served before (a daemon's
ingress cursor is saved in it) and some stay, they may be its own conversations whose thoughts
were rotated or compacted away, or another journal's: that cannot be known, so start-up stops
and says what to do (:class:`ScopeError`) rather than start them afresh or give them to the wrong
journal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ValidationError

from coven_codex.agent.ingress import CURSOR_NAME
from coven_codex.agent.state import SESSIONS_DIR, STATE_SUFFIX, SessionState, StateStore
from coven_codex.journal import START, CursorError, CursorMismatch, FileJournal, Journal, JournalError, JournalRecord
from coven_codex.journal.atomic import atomic_write, fsync_directory
from coven_codex.journal.identity import JournalIdentity, find_identity, journal_identity
from coven_codex.journal.opening import CursorListing
from coven_codex.support.limits import cut

log = logging.getLogger(__name__)

JOURNALS_DIR = "journals"
RECORD_NAME = "journal.json"
MOVE_TIMEOUT = 600.0
"""Seconds the one-time move of an older version's state may take (it reads the journal once)."""


class ScopeError(RuntimeError):
    """The conversation state cannot be placed; the message says what to do."""


class ScopeRecord(BaseModel):
    """``journal.json``: which journal a folder of conversation state serves."""

    journal_id: str
    journal: str
    """The journal's name when a daemon last served it (a path, or a Redis URL without password)."""
    legacy_checked: bool = False
    """An older version's state was looked at for this journal (done once)."""


@dataclass(frozen=True, slots=True)
class Scope:
    """Where one journal's conversation state lives in a state directory."""

    state_dir: Path
    identity: JournalIdentity

    @property
    def directory(self) -> Path:
        """``<state_dir>/journals/<identity>``: the root of the journal's :class:`StateStore`."""
        return scope_directory(self.state_dir, self.identity.value)


def scope_directory(state_dir: Path, journal_id: str) -> Path:
    """The folder of a journal's conversation state."""
    return state_dir / JOURNALS_DIR / journal_id


def legacy_states(state_dir: Path) -> list[Path]:
    """The state files an older version left directly in ``<state_dir>/sessions`` (where it kept every
    journal's conversations together)."""
    legacy = state_dir / SESSIONS_DIR
    if legacy.is_symlink() or not legacy.is_dir():
        return []
    return sorted(legacy.glob(f"*{STATE_SUFFIX}"))


def _load_record(path: Path) -> ScopeRecord | None:
    try:
        return ScopeRecord.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValidationError) as exc:
        raise ScopeError(
            f"cannot read {path} ({str(exc).splitlines()[0][:120]}); restore it, or delete it (the next start"
            " looks at an older version's state for this journal again)"
        ) from None


def _save_record(path: Path, record: ScopeRecord) -> None:
    atomic_write(path, record.model_dump_json(indent=1).encode("utf-8") + b"\n")


def newest_thought(state: SessionState) -> str | None:
    """The id that says which journal a state last served: the newest thought it handed to Codex
    (in flight, else ``reply_to``), else the newest entry it wrote itself; None when it has none."""
    if state.in_flight is not None:
        return state.in_flight.thought_id
    if state.reply_to is not None:
        return state.reply_to
    return state.own_ids[-1] if state.own_ids else None


async def _served_before(journal: Journal) -> bool:
    """Whether a daemon saved its ingress cursor in ``journal`` (any daemon of a cluster, too)."""
    try:
        if isinstance(journal, CursorListing):
            return any(name.split("@")[0] == CURSOR_NAME for name in await journal.cursors())
        return await journal.load_cursor(CURSOR_NAME) is not None
    except CursorError:
        return True  # a cursor is there (of another file: rotated)


async def _rotated_file(journal: Journal) -> Path | None:
    """The file a rotation by hand left beside the journal, when the daemon has not finished it yet
    (the saved ingress cursor belongs to it; docs/operations.md, "Rotating the journal")."""
    try:
        await journal.load_cursor(CURSOR_NAME)
    except CursorMismatch as mismatch:
        return mismatch.previous
    except JournalError:
        return None
    return None


async def _ids_in(journal: Journal, wanted: set[str]) -> set[str] | None:
    """Which of ``wanted`` are ids of entries in the journal (and in the file a rotation left beside
    it, not finished yet); None when the journal cannot be read."""
    found = await _ids_in_one(journal, wanted)
    previous = await _rotated_file(journal)
    if found is None or previous is None:
        return found
    old = FileJournal(previous, durability="never")
    try:
        return found | (await _ids_in_one(old, wanted) or set())
    finally:
        await old.aclose()


async def _ids_in_one(journal: Journal, wanted: set[str]) -> set[str] | None:
    """Which of ``wanted`` are ids of entries in ``journal``, read once from its start to its end now,
    one item at a time (memory stays small however long it is); None when it cannot be read."""
    found: set[str] = set()
    try:
        end = await journal.end_position()
        if end == START:
            return found
        items = journal.tail(START)
        try:
            async for item in items:
                if isinstance(item, JournalRecord) and item.entry.id in wanted:
                    found.add(item.entry.id)
                if item.end >= end:
                    break
        finally:
            if isinstance(items, AsyncGenerator):
                await items.aclose()
    except JournalError as exc:
        log.info("cannot read the journal from its beginning (%s)", exc)
        return None
    return found


def _move(source: Path, target_dir: Path) -> None:
    target_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    target = target_dir / source.name
    if target.exists():
        raise ScopeError(
            f"both {source} (from an older coven-codex) and {target} hold that conversation's state; keep one:"
            f" remove {source} if {target} is the one in use"
        )
    os.replace(source, target)


async def _adopt_legacy(journal: Journal, state_dir: Path, scope: Scope, name: str) -> None:
    """Move the older version's conversations this journal served into its folder (module docstring)."""
    legacy = state_dir / SESSIONS_DIR
    store = StateStore(state_dir, durability="always")
    with contextlib.closing(store):
        states = await asyncio.to_thread(store.load_all)
    evidence = {conversation: newest_thought(state) for conversation, state in states.items()}
    wanted = {thought for thought in evidence.values() if thought is not None}
    found = await _ids_in(journal, wanted) if wanted else set()
    target = scope.directory / SESSIONS_DIR
    moved = [c for c, thought in evidence.items() if thought is not None and found is not None and thought in found]
    for conversation in moved:
        await asyncio.to_thread(_move, store.path_for(conversation), target)
    if moved:
        await asyncio.to_thread(fsync_directory, target)
        await asyncio.to_thread(fsync_directory, legacy)
        log.warning(
            "moved the state of %d conversation(s) from an older coven-codex (%s) to the journal %s's own folder %s",
            len(moved),
            ", ".join(repr(cut(c)) for c in moved[:5]) + (", ..." if len(moved) > 5 else ""),
            name,
            target,
        )
    staying = sorted(c for c, thought in evidence.items() if thought is not None and c not in moved)
    if staying and await _served_before(journal):
        files = f"{shlex.quote(str(legacy))}/*{STATE_SUFFIX}"
        why = (
            "the journal cannot be read from its beginning"
            if found is None
            else "the newest thought each handed to Codex is not in what is left of this journal"
        )
        raise ScopeError(
            f"{len(staying)} conversation state(s) from an older coven-codex in {legacy}"
            f" ({', '.join(repr(cut(c)) for c in staying[:5])}{', ...' if len(staying) > 5 else ''}) cannot be told"
            f" apart: {why}, yet a daemon served this journal ({name}) before, so they may be its own (rotated or"
            " compacted away) or another journal's. Start the daemon on the journal they served (they move"
            f" there); or, if they are this journal's, move them to {target}/ (mv {files} {shlex.quote(str(target))}/);"
            f" or delete them to start those conversations afresh (rm {files}); then start again"
        )
    if staying:
        log.info(
            "%d conversation state(s) from an older coven-codex in %s are not this journal's; they wait for theirs",
            len(staying),
            legacy,
        )


async def open_scope(journal: Journal, name: str, state_dir: Path) -> Scope:
    """The folder of ``journal``'s conversation state in ``state_dir``, made (and the journal's identity
    recorded) if needed; the first time, an older version's state of this journal moves there.

    Raises :class:`ScopeError` or :class:`~coven_codex.journal.JournalError`, each saying what to do.
    """
    identity = await journal_identity(journal)
    scope = Scope(state_dir, identity)
    directory = scope.directory
    try:
        await asyncio.to_thread(directory.mkdir, parents=True, exist_ok=True, mode=0o700)
        await asyncio.to_thread((directory / SESSIONS_DIR).mkdir, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise ScopeError(
            f"cannot create {directory}: {exc.strerror}; make the state directory writable, or set state_dir"
        ) from None
    path = directory / RECORD_NAME
    record = await asyncio.to_thread(_load_record, path) or ScopeRecord(journal_id=identity.value, journal=name)
    if not record.legacy_checked and legacy_states(state_dir):
        async with asyncio.timeout(MOVE_TIMEOUT):
            await _adopt_legacy(journal, state_dir, scope, name)
    with contextlib.suppress(OSError):  # (only when empty: the older state is all placed)
        (state_dir / SESSIONS_DIR).rmdir()
    if not record.legacy_checked or record.journal != name:
        record = record.model_copy(update={"legacy_checked": True, "journal": name})
        await asyncio.to_thread(_save_record, path, record)
    return scope


async def describe_scope(journal: Journal, name: str, state_dir: Path) -> str:
    """What a start on ``journal`` would use, for ``validate`` (nothing is written)."""
    identity = await find_identity(journal)
    if identity is None:
        where = f"{state_dir / JOURNALS_DIR}/<its new identity>"
        text = f"journal {name} has no identity yet: the first start records one and keeps its conversations in {where}"
    else:
        directory = scope_directory(state_dir, identity.value)
        text = f"journal {name} is {identity.value} ({identity.location}); its conversations are in {directory}"
        if not directory.is_dir():
            text += " (a new folder: every conversation starts afresh)"
    old = legacy_states(state_dir)
    if old and (identity is None or not _checked(scope_directory(state_dir, identity.value))):
        text += (
            f"; {len(old)} conversation state(s) from an older coven-codex in {state_dir / SESSIONS_DIR} move to"
            " the journal each served at its first start"
        )
    return text


def _checked(directory: Path) -> bool:
    with contextlib.suppress(ScopeError):
        record = _load_record(directory / RECORD_NAME)
        return record is not None and record.legacy_checked
    return False
