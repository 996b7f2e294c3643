"""Finding the Codex executable (docs/configuration.md, Finding the executable).

Lookup order:

1. an explicit path (``codex_path`` containing a ``/`` or starting with ``~``): used as is;
2. a bare name (``codex_path`` without a slash, default ``codex``) looked up in the absolute
   entries of ``PATH`` (a relative or empty entry, such as a leading ``:`` or ``.``, is never
   searched: it would find files in whatever the current directory is; a name found only there
   is refused with what to fix);
3. the same name in npm's global prefix (``<npm prefix -g>/bin/<name>``), asked with a timeout
   (``npm`` too is looked up, and run, with the absolute entries of ``PATH`` only).
4. with no ``codex_path`` configured, the project-installed CLI (the pinned version
   ``scripts/setup.sh`` puts into the checkout's ``.codex-cli/``, see
   :mod:`coven_codex.codex.installed`), when it exists and lies outside the workspace.

A configured name must match ``^[A-Za-z0-9_-]+$`` before anything is looked up, so a name
cannot smuggle a path or shell syntax. Whatever is found is refused when it, or the file it
resolves to through symlinks, lies inside the workspace: a ``codex`` checked into the
repository Codex works on must not be able to hijack the bridge.

The functions here are synchronous (they stat files and may run ``npm`` for a few seconds);
call them through ``asyncio.to_thread`` from async code.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from coven_codex.codex import installed
from coven_codex.codex.process import run_captured

log = logging.getLogger(__name__)

DEFAULT_NAME = "codex"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]+$")
NPM_PREFIX_TIMEOUT = 5.0


class DiscoveryError(RuntimeError):
    """The Codex executable could not be found or was refused; the message says what to do."""


@dataclass(frozen=True, slots=True)
class FoundExecutable:
    """Where Codex was found and how."""

    path: Path  # absolute path as found (may be a symlink, e.g. npm's ``.bin/codex``)
    resolved: Path  # ``path`` with every symlink resolved
    source: str  # "explicit", "PATH", "npm" or installed.SOURCE


def split_path(value: str) -> tuple[list[str], list[str]]:
    """A ``PATH`` value split into its absolute entries and its relative or empty ones."""
    absolute: list[str] = []
    relative: list[str] = []
    for entry in value.split(os.pathsep):
        (absolute if entry and os.path.isabs(entry) else relative).append(entry)
    return absolute, relative


def absolute_path_env(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with a ``PATH`` of its absolute entries only."""
    absolute, _ = split_path(environ.get("PATH", os.defpath))
    return {**environ, "PATH": os.pathsep.join(absolute)}


def is_explicit_path(configured: str) -> bool:
    """A configured value is a path (not a name) when it has a separator or starts with ``~``."""
    return "/" in configured or os.sep in configured or configured.startswith("~")


def validate_name(name: str) -> str:
    """Return ``name`` if it is a plain executable name, else raise :class:`DiscoveryError`."""
    if not NAME_PATTERN.fullmatch(name):
        raise DiscoveryError(
            f"codex_path {name!r} is not a plain executable name (letters, digits, '_' and '-' only); "
            "give an absolute path to the executable instead"
        )
    return name


def find_codex(
    configured: str | None,
    workspace: Path,
    *,
    env: Mapping[str, str] | None = None,
    npm_timeout: float = NPM_PREFIX_TIMEOUT,
) -> FoundExecutable:
    """Find the Codex executable; see the module docstring for the order and the refusals."""
    environ = os.environ if env is None else env
    value = (configured or DEFAULT_NAME).strip()
    if not value:
        value = DEFAULT_NAME
    if is_explicit_path(value):
        found = _explicit(value)
    else:
        name = validate_name(value)
        looked_up = _on_path(name, environ) or _in_npm_prefix(name, environ, npm_timeout)
        if looked_up is None and not (configured or "").strip():
            looked_up = _project_installed(workspace)
        if looked_up is None:
            raise DiscoveryError(
                f"Codex executable {name!r} was found neither on PATH nor in npm's global prefix; "
                "install it (`npm install -g @openai/codex`, or scripts/setup.sh in a checkout) or "
                "pass --codex-path (codex_path) with its absolute path"
            )
        found = looked_up
    refuse_inside_workspace(found, workspace)
    log.debug("Codex executable %s (via %s, resolves to %s)", found.path, found.source, found.resolved)
    return found


def refuse_inside_workspace(found: FoundExecutable, workspace: Path) -> None:
    """Raise :class:`DiscoveryError` if the executable (or its symlink target) is in ``workspace``."""
    root = workspace.expanduser().resolve()
    for candidate in (found.path, found.resolved):
        if candidate == root or candidate.is_relative_to(root):
            raise DiscoveryError(
                f"refusing Codex executable {found.path}: it lies inside the workspace {root}, where a "
                "checked-in file could hijack the bridge; install Codex outside the workspace and "
                "point codex_path at it"
            )


def _project_installed(workspace: Path) -> FoundExecutable | None:
    """The project-installed CLI as a candidate: skipped (not refused) when inside the workspace."""
    path = installed.project_codex()
    if path is None:
        return None
    found = _checked(path, installed.SOURCE)
    try:
        refuse_inside_workspace(found, workspace)
    except DiscoveryError:
        return None
    return found


def _explicit(value: str) -> FoundExecutable:
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = Path.cwd() / path
    path = Path(os.path.normpath(path))
    if not path.exists():
        raise DiscoveryError(f"codex_path {path} does not exist; fix codex_path or install Codex there")
    return _checked(path, "explicit")


def _on_path(name: str, environ: Mapping[str, str]) -> FoundExecutable | None:
    absolute, relative = split_path(environ.get("PATH", os.defpath))
    hit = shutil.which(name, path=os.pathsep.join(absolute)) if absolute else None
    if hit is None:
        if relative and shutil.which(name, path=os.pathsep.join(entry or "." for entry in relative)):
            shown = ", ".join(repr(entry) for entry in relative)
            raise DiscoveryError(
                f"Codex executable {name!r} is found only through the relative or empty PATH entries {shown}, "
                "which depend on the current directory; remove them from PATH and add Codex's folder by "
                "absolute path, or set codex_path to the absolute path of the executable"
            )
        return None
    return _checked(Path(os.path.normpath(hit)), "PATH")


def npm_global_prefix(environ: Mapping[str, str], timeout: float = NPM_PREFIX_TIMEOUT) -> Path | None:
    """``npm prefix -g``, or ``None`` if npm is missing, fails or takes longer than ``timeout``."""
    env = absolute_path_env(environ)
    npm = shutil.which("npm", path=env["PATH"]) if env["PATH"] else None
    if npm is None:
        return None
    try:
        done = run_captured([npm, "prefix", "-g"], env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        log.warning("`npm prefix -g` took longer than %.0fs; not looking for Codex there", timeout)
        return None
    except OSError as exc:
        log.warning("cannot run npm (%s); not looking for Codex in its global prefix", exc)
        return None
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    if done.returncode != 0 or not lines:
        log.warning("`npm prefix -g` failed (exit %s); not looking for Codex there", done.returncode)
        return None
    return Path(lines[-1])


def _in_npm_prefix(name: str, environ: Mapping[str, str], timeout: float) -> FoundExecutable | None:
    prefix = npm_global_prefix(environ, timeout)
    if prefix is None:
        return None
    candidate = prefix / "bin" / name
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return _checked(candidate, "npm")
    return None


def _checked(path: Path, source: str) -> FoundExecutable:
    resolved = path.resolve()
    if not resolved.is_file():
        raise DiscoveryError(f"Codex executable {path} is not a file; point codex_path at the executable")
    if not os.access(resolved, os.X_OK):
        raise DiscoveryError(f"Codex executable {path} is not executable; run `chmod +x {path}`")
    return FoundExecutable(path=path, resolved=resolved, source=source)
