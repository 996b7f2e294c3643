"""Finding a thread's rollout file under ``$CODEX_HOME/sessions/YYYY/MM/DD/``.

File names are ``rollout-<local time>-<thread id>.jsonl``; the date folders and the time in
the name use the machine's *local* time, so nothing here derives a folder from a UTC date:
folders are compared by name (newest first) and files by modification time.

Since 0.151 Codex creates the file lazily, at the first turn, so a caller that knows the
thread id early must wait for it: :func:`locate_rollout` watches instead of sleeping in a loop.
On Linux it watches, on the event loop's one shared inotify instance
(:mod:`coven_codex.tailing.inotify`), only where the file can appear: ``sessions`` and its
newest year, month and day folders (or ``CODEX_HOME`` for ``sessions`` itself), woken only by
new date folders and by its own file's name. A waiting conversation thus holds no file
descriptor and no inotify instance of its own, and costs no CPU until its file appears, however
many wait at once (1,000 conversations under ``ulimit -n 1024``; docs/performance.md). Elsewhere
(or when inotify cannot be used) it falls back to a watchfiles watcher of ``CODEX_HOME`` per
waiting caller.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from collections.abc import Callable
from pathlib import Path

from watchfiles import Change, awatch

from coven_codex.rollout.parser import record_from_object
from coven_codex.rollout.records import RolloutRecord, SessionMeta
from coven_codex.tailing import inotify

log = logging.getLogger(__name__)

_ROLLOUT_NAME = re.compile(
    r"^rollout-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-(?P<thread>[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-"
    r"[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12})\.jsonl$"
)
FIRST_LINE_LIMIT = 4 * 2**20
RECHECK_SECONDS = 1.0
"""While waiting, the file system is re-checked at least this often, which closes the gap
between a first look and the watcher starting."""


class RolloutNotFoundError(FileNotFoundError):
    """No rollout file matched (within the time given)."""


def thread_id_from_path(path: Path) -> str | None:
    """The thread id at the end of a rollout file name, or ``None`` for other names."""
    match = _ROLLOUT_NAME.match(path.name)
    return match["thread"] if match else None


def _day_dirs(sessions: Path) -> list[Path]:
    """``sessions/YYYY/MM/DD`` folders, newest (by name) first."""
    days = [day for day in sessions.glob("[0-9][0-9][0-9][0-9]/[0-9][0-9]/[0-9][0-9]") if day.is_dir()]
    return sorted(days, key=lambda day: day.relative_to(sessions).parts, reverse=True)


def find_rollout(codex_home: Path, thread_id: str) -> Path | None:
    """The rollout file of ``thread_id`` if it exists now (newest day folder first)."""
    sessions = codex_home / "sessions"
    suffix = f"-{thread_id}.jsonl"
    for day in _day_dirs(sessions):
        for path in day.glob(f"rollout-*{suffix}"):
            if path.name.endswith(suffix) and path.is_file():
                return path
    return None


def read_session_meta(path: Path) -> SessionMeta | None:
    """The ``session_meta`` of a rollout file (its first line), or ``None`` when the file does
    not start with a complete, readable one."""
    try:
        with path.open("rb") as handle:
            first = handle.readline(FIRST_LINE_LIMIT)
    except OSError:
        return None
    if not first.endswith(b"\n"):
        return None
    try:
        obj = json.loads(first.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(obj, dict):
        return None
    record = record_from_object(obj, 0, first)
    if isinstance(record, RolloutRecord) and isinstance(record.payload, SessionMeta):
        return record.payload
    return None


def _same_dir(a: str, b: Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def newest_rollout_for_cwd(codex_home: Path, cwd: Path, *, since: float | None = None) -> Path | None:
    """The most recently modified rollout whose ``session_meta.cwd`` is ``cwd``; files last
    modified before ``since`` (epoch seconds) are not considered."""
    best: tuple[float, Path] | None = None
    for day in _day_dirs(codex_home / "sessions"):
        for path in day.glob("rollout-*.jsonl"):
            try:
                mtime = path.stat().st_mtime
            except OSError:
                continue
            if since is not None and mtime < since:
                continue
            if best is not None and mtime <= best[0]:
                continue
            meta = read_session_meta(path)
            if meta is not None and meta.cwd is not None and _same_dir(meta.cwd, cwd):
                best = (mtime, path)
        if best is not None and since is None:
            break  # an older day folder cannot hold a newer file of a live session
    return best[1] if best else None


async def locate_rollout(
    codex_home: Path,
    *,
    thread_id: str | None,
    cwd: Path | None,
    timeout: float,  # noqa: ASYNC109  # a shared interface: callers pass the bound, not a scope
    since: float | None = None,
) -> Path:
    """Find (waiting up to ``timeout`` seconds) the rollout of ``thread_id``, or, when the
    thread id is unknown, the newest rollout whose ``session_meta.cwd`` is ``cwd``.

    Raises :class:`RolloutNotFoundError` naming what was looked for, and where.
    """
    if thread_id is None and cwd is None:
        raise ValueError("locate_rollout needs a thread_id or a cwd")
    if not await asyncio.to_thread(codex_home.is_dir):
        raise RolloutNotFoundError(f"CODEX_HOME {codex_home} does not exist; start Codex with this CODEX_HOME first")

    def look() -> Path | None:
        if thread_id is not None:
            return find_rollout(codex_home, thread_id)
        assert cwd is not None
        return newest_rollout_for_cwd(codex_home, cwd, since=since)

    found = await asyncio.to_thread(look)  # directory scans stay off the event loop
    if found is not None:
        return found
    try:
        if inotify.inotify_available():
            found = await _wait_inotify(codex_home, thread_id, look, timeout)
        else:
            found = await _wait_watchfiles(codex_home, look, timeout)
    except inotify.InotifyUnavailable as exc:
        log.info("watching %s with inotify failed (%s); falling back to watchfiles", codex_home, exc)
        found = await _wait_watchfiles(codex_home, look, timeout)
    if found is not None:
        return found
    sessions = codex_home / "sessions"
    wanted = f"thread {thread_id}" if thread_id is not None else f"a session whose cwd is {cwd}"
    raise RolloutNotFoundError(
        f"no rollout file for {wanted} appeared under {sessions} within {timeout:g} s. Codex writes it at the "
        "first turn: check that the turn started, and that Codex runs with this CODEX_HOME."
    )


def _is_date_folder(name: str) -> bool:
    return name.isdigit()


def _watch_points(codex_home: Path, thread_id: str | None) -> list[tuple[Path, inotify.NameMatch]]:
    """Where (and for which names) a new rollout of ``thread_id`` (any rollout when ``None``)
    shows up: ``sessions`` and its newest year, month and day folders (module docstring)."""
    sessions = codex_home / "sessions"
    if not sessions.is_dir():
        return [(codex_home, "sessions")]
    in_day = inotify.NameSuffix(f"-{thread_id}.jsonl" if thread_id is not None else ".jsonl")
    points: list[tuple[Path, inotify.NameMatch]] = [(sessions, _is_date_folder)]
    folder = sessions
    for depth in range(3):
        try:
            names = sorted((name for name in os.listdir(folder) if _is_date_folder(name)), reverse=True)
        except OSError:
            break
        newest = next((folder / name for name in names if (folder / name).is_dir()), None)
        if newest is None:
            break
        folder = newest
        points.append((folder, in_day if depth == 2 else _is_date_folder))
    return points


async def _wait_inotify(
    codex_home: Path,
    thread_id: str | None,
    look: Callable[[], Path | None],
    timeout: float,  # noqa: ASYNC109  # the caller's bound, passed on
) -> Path | None:
    """Wait (at most ``timeout`` s) on the loop's shared inotify instance until ``look`` finds
    the file; ``None`` when it did not appear in time."""
    try:
        async with asyncio.timeout(timeout):
            while True:
                points = await asyncio.to_thread(_watch_points, codex_home, thread_id)
                subscriptions: list[inotify.InotifySubscription] = []
                try:
                    for directory, name in points:
                        try:
                            subscriptions.append(inotify.subscribe(directory, name))
                        except FileNotFoundError:
                            continue  # the folder went away meanwhile: the next round looks again
                    found = await asyncio.to_thread(look)  # after subscribing: nothing is missed
                    if found is not None:
                        return found
                    await _first_wake(subscriptions)
                finally:
                    for subscription in subscriptions:
                        await subscription.aclose()
    except TimeoutError:
        return None


async def _first_wake(subscriptions: list[inotify.InotifySubscription]) -> None:
    """Return once any of ``subscriptions`` was woken (at once when there are none to wait on,
    so the caller looks again)."""
    if not subscriptions:
        await asyncio.sleep(RECHECK_SECONDS)
        return
    waits = [asyncio.create_task(subscription.wait()) for subscription in subscriptions]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
        await asyncio.gather(*waits, return_exceptions=True)


async def _wait_watchfiles(
    codex_home: Path,
    look: Callable[[], Path | None],
    timeout: float,  # noqa: ASYNC109  # the caller's bound, passed on
) -> Path | None:
    """The fallback without inotify: a watchfiles watcher of ``CODEX_HOME`` (one per caller),
    looking again on every change in ``sessions`` and at least every :data:`RECHECK_SECONDS`."""
    sessions = str(codex_home / "sessions")

    def in_sessions(_change: Change, path: str) -> bool:
        return path == sessions or path.startswith(sessions + os.sep)

    stop = asyncio.Event()
    try:
        async with asyncio.timeout(timeout):
            async for _changes in awatch(
                codex_home,
                watch_filter=in_sessions,
                stop_event=stop,
                debounce=20,
                step=10,
                rust_timeout=int(RECHECK_SECONDS * 1000),
                yield_on_timeout=True,
            ):
                found = await asyncio.to_thread(look)
                if found is not None:
                    return found
    except TimeoutError:
        return None
    finally:
        stop.set()
    return None
