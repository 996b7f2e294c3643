"""Probes of the places the daemon reads and writes: workspace, CODEX_HOME, sessions, journal.

Each write test creates a uniquely named file and removes it again, so a probe leaves
nothing behind; a folder that does not exist yet is checked through its nearest existing
parent (the daemon will create it).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

from coven_codex.agent.chat_settings import project_problems
from coven_codex.validate.framework import ProbeContext, ProbeResult, Status


def nearest_existing(path: Path) -> Path:
    """``path`` itself if it exists, else its nearest existing ancestor."""
    current = path
    while not current.exists() and current != current.parent:
        current = current.parent
    return current


def _try_write(folder: Path) -> str | None:
    """Create and delete a scratch file in ``folder``; the error text, or None when it worked."""
    try:
        fd, name = tempfile.mkstemp(prefix=".coven-validate-", dir=folder)
    except OSError as exc:
        return exc.strerror or str(exc)
    try:
        os.write(fd, b"ok")
    except OSError as exc:
        return exc.strerror or str(exc)
    finally:
        os.close(fd)
        os.unlink(name)
    return None


async def check_writable_dir(path: Path, what: str, setting: str) -> ProbeResult:
    """``path`` is a writable folder, or would be created in one (its nearest existing ancestor)."""
    existing = nearest_existing(path)
    if not existing.is_dir():
        return ProbeResult.fail(f"{what} {path}: {existing} is not a folder", f"Point {setting} at a folder.")
    error = await asyncio.to_thread(_try_write, existing)
    if error is not None:
        return ProbeResult.fail(
            f"{what} {path} is not writable ({error})",
            f"Give this user write access to {existing} (chmod/chown), or choose another {setting}.",
        )
    suffix = "" if existing == path else f" (will be created; {existing} is writable)"
    return ProbeResult.ok(f"{what} {path} is writable{suffix}")


async def probe_workspace(context: ProbeContext) -> ProbeResult:
    """The workspace exists and is writable."""
    workspace = context.settings.workspace
    if not workspace.exists():
        return ProbeResult.fail(
            f"workspace {workspace} does not exist", f"Create it (mkdir -p {workspace}) or pass --workspace."
        )
    return await check_writable_dir(workspace, "workspace", "--workspace")


async def probe_projects(context: ProbeContext) -> ProbeResult:
    """Every ``[projects]`` entry is a directory inside the workspace or a ``workspace_roots`` entry."""
    settings = context.settings
    if not settings.projects:
        return ProbeResult(Status.SKIP, "no [projects] configured")
    problems = await asyncio.to_thread(project_problems, settings)
    if problems:
        return ProbeResult.fail("; ".join(problems), "Fix [projects] in coven.toml (or add a workspace_roots entry).")
    return ProbeResult.ok(f"{len(settings.projects)} project(s): {', '.join(sorted(settings.projects))}")


async def probe_codex_home(context: ProbeContext) -> ProbeResult:
    """The isolated ``CODEX_HOME`` is writable (or can be created)."""
    return await check_writable_dir(context.settings.resolved_codex_home, "CODEX_HOME", "codex_home")


async def probe_state_dir(context: ProbeContext) -> ProbeResult:
    """The state folder is writable (or can be created)."""
    return await check_writable_dir(context.settings.resolved_state_dir, "state folder", "state_dir")


async def probe_sessions_folder(context: ProbeContext) -> ProbeResult:
    """Codex's rollout folder (``CODEX_HOME/sessions``) is readable, if it exists yet."""
    sessions = context.settings.resolved_codex_home / "sessions"
    if not sessions.exists():
        return ProbeResult.ok(f"{sessions} does not exist yet; Codex creates it at the first turn")
    if not sessions.is_dir():
        return ProbeResult.fail(f"{sessions} is not a folder", f"Remove or rename {sessions}.")

    def _readable() -> str | None:
        try:
            for _ in zip(range(1000), sessions.rglob("rollout-*.jsonl"), strict=False):
                pass
        except OSError as exc:
            return exc.strerror or str(exc)
        return None if os.access(sessions, os.R_OK | os.X_OK) else "permission denied"

    error = await asyncio.to_thread(_readable)
    if error is not None:
        return ProbeResult.fail(
            f"cannot read {sessions} ({error})", f"Give this user read access to {sessions} (chmod -R u+rX)."
        )
    return ProbeResult.ok(f"{sessions} is readable")


async def probe_journal(context: ProbeContext) -> ProbeResult:
    """The journal is a readable and writable file, or can be created in its folder (warns when none is set)."""
    journal = context.settings.journal
    if journal is None:
        return ProbeResult.warn("no journal configured", "Pass --journal PATH (or set journal in coven.toml).")
    if isinstance(journal, str):
        return ProbeResult.ok("the journal is on Redis (the redis checks look at it)")
    folder = journal.parent
    if not folder.is_dir():
        return ProbeResult.fail(
            f"the journal's folder {folder} does not exist",
            f"Create it (mkdir -p {folder}) or choose another --journal.",
        )
    if journal.exists():
        if not journal.is_file():
            return ProbeResult.fail(f"journal {journal} is not a regular file", "Point --journal at a file.")
        if not os.access(journal, os.R_OK | os.W_OK):
            return ProbeResult.fail(
                f"journal {journal} is not readable and writable by this user",
                f"chmod u+rw {journal}, or run as its owner.",
            )
        return ProbeResult.ok(f"journal {journal} exists and is writable")
    return await check_writable_dir(folder, "journal folder", "--journal")


async def probe_timeouts(context: ProbeContext) -> ProbeResult:
    """Settings clamps out-of-range timeouts; report where the clamping changed a value."""
    settings, raw = context.settings, context.raw_settings
    changed = [
        f"{key} {raw[key]} → {getattr(settings, key):g}"
        for key in ("turn_timeout", "stream_idle_timeout")
        if key in raw and float(raw[key]) != getattr(settings, key)
    ]
    if changed:
        return ProbeResult.warn(
            "out-of-range timeouts were clamped: " + ", ".join(changed),
            "Set turn_timeout within 30-3600 s and stream_idle_timeout within 10 s to turn_timeout-1.",
        )
    return ProbeResult.ok(
        f"turn_timeout {settings.turn_timeout:g} s, stream_idle_timeout {settings.stream_idle_timeout:g} s"
    )
