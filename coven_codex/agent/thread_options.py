"""The options a thought may give the Codex thread it starts (docs/journal-protocol.md, *Thread options*).

``cwd`` is accepted only inside the daemon's ``workspace`` or one of the operator's ``workspace_roots``
(:attr:`Settings.cwd_roots`), checked on the real
path (symbolic links resolved first, so a link inside a root cannot lead out of it); ``timeout``
is bounded by ``turn_timeout``; ``resume_thread`` (take that thread over: every driver resumes a thread)
and ``fork_thread`` (a new thread from its history: a driver that forks threads) exclude each other. A thought
whose options are refused is not handed to Codex: the session writes one ``REFUSED`` error.

The daemon only passes the directory on to Codex as the thread's working directory; it never
imports, reads or runs anything under it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from coven_codex.codex.drivers import ThreadOptions
from coven_codex.entries import ResetEntry, ThoughtEntry
from coven_codex.support.limits import MAX_MODEL_CHARS, cut

MIN_TIMEOUT = 1.0
"""The shortest ``timeout`` a thought may give (seconds); the longest is ``turn_timeout``."""
REFUSED_HINT = (
    "Name a directory inside the daemon's workspace or one of its workspace_roots (the daemon's operator adds a "
    'root with `coven-codex run --workspace-root DIR`, repeatable, or `workspace_roots = ["DIR"]` in coven.toml), '
    "or leave cwd out to work in the workspace; a timeout in seconds, a model name and a resume_thread or a "
    "fork_thread (not both) the driver can use; and send it again."
)


class OptionsRefused(ValueError):
    """A thought's or a reset's thread options cannot be used; the message says why."""


def check_cwd(cwd: str, roots: Sequence[Path]) -> str:
    """The real path of ``cwd`` if it is a directory inside one of ``roots`` (the daemon's workspace first,
    then its ``workspace_roots``); else :class:`OptionsRefused` (the refusal's hint says how to add a root)."""
    shown = cut(cwd, 120)
    path = Path(cwd)
    if not path.is_absolute():
        raise OptionsRefused(f"cwd {shown!r} is not an absolute path")
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):
        raise OptionsRefused(f"cwd {shown!r} does not exist") from None
    if not real.is_dir():
        raise OptionsRefused(f"cwd {shown!r} is not a directory")
    for root in roots:
        try:
            real_root = root.resolve(strict=True)
        except (OSError, RuntimeError):
            continue
        if real.is_relative_to(real_root):
            return str(real)
    raise OptionsRefused(f"cwd {cut(cwd, 80)!r} is outside the workspace and every root (links resolved)")


def thought_options(
    entry: ThoughtEntry, roots: Sequence[Path], *, turn_timeout: float, forks_threads: bool
) -> ThreadOptions | None:
    """The checked options of ``entry`` (``None`` if it gives none); :class:`OptionsRefused` if one is bad.

    Reads the file system (the ``cwd``): call it off the event loop.
    """
    if not requests_options(entry):
        return None
    workspace = check_cwd(entry.cwd, roots) if entry.cwd is not None else None
    if entry.model is not None and not 0 < len(entry.model) <= MAX_MODEL_CHARS:
        raise OptionsRefused(f"model must be 1 to {MAX_MODEL_CHARS} characters long")
    timeout = entry.timeout
    if timeout is not None:
        if not math.isfinite(timeout) or timeout <= 0:
            raise OptionsRefused("timeout must be a positive number of seconds")
        timeout = min(max(timeout, MIN_TIMEOUT), turn_timeout)
    if entry.resume_thread is not None and entry.fork_thread is not None:
        raise OptionsRefused("give resume_thread (continue that thread) or fork_thread (a copy of it), not both")
    if entry.fork_thread is not None:
        if not forks_threads:
            raise OptionsRefused(
                "fork_thread needs the app-server driver (Codex 0.169 or newer); this Codex runs on exec"
            )
        check_thread_id(entry.fork_thread, "fork_thread")
    if entry.resume_thread is not None:
        check_thread_id(entry.resume_thread, "resume_thread")
    return ThreadOptions(
        workspace=workspace,
        model=entry.model,
        turn_timeout=timeout,
        fork_from=entry.fork_thread,
        take_over=entry.resume_thread,
    )


def requests_options(entry: ThoughtEntry) -> bool:
    """Whether ``entry`` gives any thread option (checked when the conversation takes it)."""
    given = (entry.cwd, entry.model, entry.resume_thread, entry.fork_thread)
    return any(option is not None for option in given) or bool(entry.timeout)


def check_thread_id(thread_id: str, option: str) -> None:
    """:class:`OptionsRefused` unless ``thread_id`` can be a Codex thread id."""
    if not thread_id or len(thread_id) > MAX_MODEL_CHARS:
        raise OptionsRefused(f"{option} is not a Codex thread id")


def reset_workspace(entry: ResetEntry, roots: Sequence[Path]) -> str | None:
    """The checked ``cwd`` of a ``reset`` (``None`` if it gives none); :class:`OptionsRefused` if it is bad."""
    return check_cwd(entry.cwd, roots) if entry.cwd is not None else None
