"""How Codex is started: its native binary by absolute path, never through a relative ``PATH`` entry.

Codex on npm is a Node wrapper, ``bin/codex.js``, whose first line is ``#!/usr/bin/env node``; Codex
runs with the workspace as its current directory, so with a relative or empty ``PATH`` entry (a
leading ``:``, a ``.``) a ``node`` planted in the workspace would run in its place. The wrapper does
little besides starting the native binary, so :func:`resolve_launch` does that itself:

- **native**: the npm package layout reveals the binary; it is started by its absolute path with
  what the wrapper would add to the environment:

  - 0.169 and later: ``<node_modules>/@openai/codex-<platform>/vendor/<triple>/bin/codex`` (the
    platform package, found the way Node's ``require.resolve`` finds it from the wrapper, else
    the package's own ``vendor/``); ``CODEX_MANAGED_PACKAGE_ROOT`` = the package root and
    ``CODEX_MANAGED_BY_<NPM|BUN|PNPM>=1`` (the others removed);
  - 0.47: ``<package>/vendor/<triple>/codex/codex``, with ``<package>/vendor/<triple>/path`` (the
    bundled ``rg``) put in front of ``PATH``, and ``CODEX_MANAGED_BY_<NPM|BUN>=1``;

- **wrapper**: no native binary found; run as ``<absolute node> <absolute wrapper.js>``, with
  ``node`` looked up only in the absolute entries of ``PATH``; if it is only found through a
  relative or empty entry, this is refused (:class:`LaunchError`) with what to fix;
- **executable**: anything else (a native binary named directly, a script of the user's) is
  started by its absolute path.

In every case the ``PATH`` given to Codex keeps only absolute entries
(:meth:`CodexLaunch.environment`), so nothing Codex or its tools start is found through one either.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from coven_codex.codex.discovery import DiscoveryError, FoundExecutable, split_path

LaunchKind = Literal["native", "wrapper", "executable"]

PACKAGE_NAME = "@openai/codex"
PLATFORM_PACKAGES = {
    "x86_64-unknown-linux-musl": "@openai/codex-linux-x64",
    "aarch64-unknown-linux-musl": "@openai/codex-linux-arm64",
    "x86_64-apple-darwin": "@openai/codex-darwin-x64",
    "aarch64-apple-darwin": "@openai/codex-darwin-arm64",
}
MANAGED_BY = ("CODEX_MANAGED_BY_NPM", "CODEX_MANAGED_BY_BUN", "CODEX_MANAGED_BY_PNPM", "CODEX_MANAGED_BY_VITE_PLUS")


class LaunchError(DiscoveryError):
    """Codex cannot be started safely; the message says what to fix."""


@dataclass(frozen=True, slots=True)
class CodexLaunch:
    """The command that starts Codex and what it adds to the environment."""

    kind: LaunchKind
    command: tuple[str, ...]  # absolute paths; Codex's own arguments follow
    program: Path  # what runs: the native binary, the wrapper script, or the executable
    set_env: Mapping[str, str] = field(default_factory=dict)
    unset_env: tuple[str, ...] = ()
    path_prepend: tuple[str, ...] = ()

    def argv(self, *args: str) -> list[str]:
        """The full command line for Codex with ``args``."""
        return [*self.command, *args]

    def environment(self, base: Mapping[str, str]) -> dict[str, str]:
        """``base`` with what the wrapper would set, and a ``PATH`` of absolute entries only."""
        env = {key: value for key, value in base.items() if key not in self.unset_env}
        env.update(self.set_env)
        absolute, _ = split_path(base.get("PATH", os.defpath))
        env["PATH"] = os.pathsep.join(dict.fromkeys([*self.path_prepend, *absolute]))
        return env

    def describe(self) -> str:
        """One line for logs and ``validate``: which launch was chosen, by which path."""
        if self.kind == "native":
            return f"native binary {self.program}"
        if self.kind == "wrapper":
            return f"Node wrapper {self.program} run by {self.command[0]} (no native binary found)"
        return f"executable {self.program}"


def relative_path_entries(environ: Mapping[str, str]) -> list[str]:
    """The relative and empty entries of ``PATH`` (shown as ``''`` for an empty one)."""
    return split_path(environ.get("PATH", os.defpath))[1]


def resolve_launch(found: FoundExecutable, environ: Mapping[str, str] | None = None) -> CodexLaunch:
    """How to start the Codex that was found; see the module docstring. Raises :class:`LaunchError`."""
    env = os.environ if environ is None else environ
    package = _wrapper_package(found.resolved)
    if package is None:
        return CodexLaunch("executable", (str(found.resolved),), found.resolved)
    triple = _target_triple()
    if triple is not None:
        native = _native_169(found.resolved, package, triple, env) or _native_047(package, triple, env)
        if native is not None:
            return native
    node = _absolute_node(found, env)
    return CodexLaunch("wrapper", (str(node), str(found.resolved)), found.resolved)


def _wrapper_package(resolved: Path) -> Path | None:
    """The ``@openai/codex`` package root if ``resolved`` is its ``bin/codex.js``."""
    if resolved.name != "codex.js" or resolved.parent.name != "bin":
        return None
    root = resolved.parent.parent
    try:
        meta = json.loads((root / "package.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return root.resolve() if isinstance(meta, dict) and meta.get("name") == PACKAGE_NAME else None


def _target_triple() -> str | None:
    machine = platform.machine().lower()
    cpu = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}.get(machine)
    if cpu is None:
        return None
    if sys.platform.startswith("linux"):
        return f"{cpu}-unknown-linux-musl"
    if sys.platform == "darwin":
        return f"{cpu}-apple-darwin"
    return None


def _platform_package_dir(wrapper: Path, name: str) -> Path | None:
    """Where Node's ``require.resolve("<name>/package.json")`` finds ``name`` from ``wrapper``."""
    directory = wrapper.parent
    while True:
        if directory.name != "node_modules":
            candidate = directory / "node_modules" / name
            if (candidate / "package.json").is_file():
                return candidate
        if directory.parent == directory:
            return None
        directory = directory.parent


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _native_169(wrapper: Path, package: Path, triple: str, env: Mapping[str, str]) -> CodexLaunch | None:
    platform_package = _platform_package_dir(wrapper, PLATFORM_PACKAGES[triple])
    vendor = platform_package / "vendor" if platform_package is not None else package / "vendor"
    binary = vendor / triple / "bin" / "codex"
    if not _executable(binary):
        return None
    manager = _package_manager(package, env)
    return CodexLaunch(
        "native",
        (str(binary.resolve()),),
        binary.resolve(),
        set_env={"CODEX_MANAGED_PACKAGE_ROOT": str(package), f"CODEX_MANAGED_BY_{manager}": "1"},
        unset_env=MANAGED_BY,
    )


def _native_047(package: Path, triple: str, env: Mapping[str, str]) -> CodexLaunch | None:
    arch_root = package / "vendor" / triple
    binary = arch_root / "codex" / "codex"
    if not _executable(binary):
        return None
    bun = _bun_by_environment(env) or any(
        env.get(name) for name in ("BUN_INSTALL", "BUN_INSTALL_GLOBAL_DIR", "BUN_INSTALL_BIN_DIR")
    )
    extra = (str(arch_root / "path"),) if (arch_root / "path").is_dir() else ()
    return CodexLaunch(
        "native",
        (str(binary.resolve()),),
        binary.resolve(),
        set_env={f"CODEX_MANAGED_BY_{'BUN' if bun else 'NPM'}": "1"},
        path_prepend=extra,
    )


def _bun_by_environment(env: Mapping[str, str]) -> bool:
    return "bun/" in env.get("npm_config_user_agent", "") or "bun" in env.get("npm_execpath", "")


def _package_manager(package: Path, env: Mapping[str, str]) -> str:
    """What the 0.169 wrapper reports as the package manager: PNPM, BUN or NPM (the default)."""
    for directory in (package, *package.parents):
        modules = directory / "node_modules"
        if (modules / ".modules.yaml").is_file():
            try:
                if (modules / "@openai" / "codex").resolve() == package:
                    return "PNPM"
            except OSError:
                pass
    if _bun_by_environment(env) or ".bun/install/global" in str(package):
        return "BUN"
    return "NPM"


def _absolute_node(found: FoundExecutable, env: Mapping[str, str]) -> Path:
    """``node`` from the absolute ``PATH`` entries; a ``node`` reachable only otherwise is refused."""
    absolute, relative = split_path(env.get("PATH", os.defpath))
    hit = shutil.which("node", path=os.pathsep.join(absolute)) if absolute else None
    if hit is not None:
        return Path(hit)
    shown = ", ".join(repr(entry) for entry in relative)
    if relative and _which_in(relative):
        raise LaunchError(
            f"Codex at {found.path} is the npm Node wrapper and its native binary was not found, and `node` is "
            f"found only through the relative or empty PATH entries {shown}, where a `node` planted in the "
            "workspace would run instead; remove relative and empty entries from PATH and put Node.js's "
            "folder in it by absolute path, or reinstall Codex (npm install -g @openai/codex) so its native "
            "binary is present"
        )
    raise LaunchError(
        f"Codex at {found.path} is the npm Node wrapper and its native binary was not found, and `node` is not "
        "on PATH; install Node.js (and put its folder in PATH by absolute path), or reinstall Codex "
        "(npm install -g @openai/codex) so its native binary is present"
    )


def _which_in(entries: Sequence[str]) -> bool:
    return shutil.which("node", path=os.pathsep.join(entry or "." for entry in entries)) is not None
