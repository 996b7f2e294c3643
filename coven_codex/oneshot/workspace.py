"""The workspace of a one-shot run (docs/exec.md, The workspace).

``W`` is prepared the same way every time, from the same inputs:

- ``git init`` when ``W/.git`` does not exist (Codex expects a repository), and
  ``/.codex-home/`` and ``/traces/`` listed in ``W/.git/info/exclude`` (so neither shows up in
  ``git status`` and no tracked file changes);
- ``W/.codex-home``: the isolated ``CODEX_HOME``, prepared by the daemon's own
  :func:`coven_codex.codex.home.prepare_codex_home` at this location: the base config (if any)
  copied fresh and merged (comments and all), the trust entry for ``W``, the user's ``auth.json``
  carried, ``AGENTS.md`` rendered from the prompt template; plus what a one-shot run adds to the
  config: ``sandbox_mode = "workspace-write"`` unless the base config sets one, writable roots =
  ``W`` only (``[sandbox_workspace_write]`` with ``writable_roots = [W]`` and the temporary
  directories excluded), and, with trace capture, the ``[otel]`` exporters;
- read-only directories must exist and lie outside ``W`` (everything inside ``W`` is writable):
  Codex's sandbox reads the whole disk, so they are readable, and they are never a writable root.

:func:`plan_workspace` checks everything and writes nothing (``--dry-run``);
:func:`prepare_workspace` writes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coven_codex.codex.agents_md import TemplateError, render_agents_md
from coven_codex.codex.config_merge import KeyPath
from coven_codex.codex.discovery import absolute_path_env
from coven_codex.codex.home import CodexHome, CodexHomeError, prepare_codex_home, read_base_config
from coven_codex.codex.process import run_captured
from coven_codex.traces.otel_config import OtlpTarget, otel_tables

HOME_DIR = ".codex-home"
TRACES_DIR = "traces"
TRACES_FILE = "traces.jsonl"
STDOUT_FILE = "stdout.log"
EXCLUDED = (f"/{HOME_DIR}/", f"/{TRACES_DIR}/")
GIT_TIMEOUT = 30.0
OPTIONS = ("--prompt-file", "the command line as -V NAME=VALUE")


class WorkspaceError(RuntimeError):
    """The workspace cannot be prepared; the message says what to do."""


@dataclass(frozen=True, slots=True)
class WorkspaceSpec:
    """The inputs that decide the workspace."""

    workspace: Path
    base_config: Path | None = None
    read_only_dirs: tuple[Path, ...] = ()
    prompt_file: Path | None = None
    variables: Mapping[str, str] | None = None

    @property
    def root(self) -> Path:
        """The workspace as an absolute path with symlinks resolved."""
        return self.workspace.expanduser().resolve()

    @property
    def codex_home(self) -> Path:
        """``W/.codex-home``."""
        return self.root / HOME_DIR

    @property
    def traces_dir(self) -> Path:
        """``W/traces``."""
        return self.root / TRACES_DIR


@dataclass(frozen=True, slots=True)
class WorkspacePlan:
    """What :func:`prepare_workspace` will do, found without writing anything."""

    spec: WorkspaceSpec
    git_init: bool
    read_only_dirs: tuple[Path, ...]
    agents_md: str | None


def plan_workspace(spec: WorkspaceSpec) -> WorkspacePlan:
    """Check the inputs (raise :class:`WorkspaceError`) and say what preparing would do."""
    root = spec.root
    if root.exists() and not root.is_dir():
        raise WorkspaceError(f"workspace {root} is not a directory; pass a directory as --workspace")
    read_only: list[Path] = []
    for given in spec.read_only_dirs:
        path = given.expanduser().resolve()
        if not path.is_dir():
            raise WorkspaceError(
                f"read-only directory {given} does not exist or is not a directory; fix --read-only-dir"
            )
        if path == root or path.is_relative_to(root):
            raise WorkspaceError(
                f"read-only directory {path} lies inside the workspace {root}, which Codex may write everywhere; "
                "move it out of the workspace or drop --read-only-dir"
            )
        read_only.append(path)
    try:
        read_base_config(spec.base_config)
    except CodexHomeError as exc:
        raise WorkspaceError(str(exc)) from None
    agents = None
    if spec.prompt_file is not None:
        try:
            agents = render_agents_md(spec.prompt_file, root, spec.variables or {}, options=OPTIONS)
        except TemplateError as exc:
            raise WorkspaceError(str(exc)) from None
    return WorkspacePlan(spec, not (root / ".git").exists(), tuple(read_only), agents)


def prepare_workspace(
    plan: WorkspacePlan, *, otel: OtlpTarget | None, environ: Mapping[str, str] | None = None
) -> CodexHome:
    """Prepare the workspace as planned (see the module docstring); the isolated home."""
    spec = plan.spec
    root = spec.root
    env = dict(os.environ if environ is None else environ)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WorkspaceError(f"cannot create workspace {root}: {exc.strerror}; check --workspace") from None
    if not (root / ".git").exists():
        _git_init(root, env)
    _exclude(root)
    owned: dict[KeyPath, Mapping[str, Any]] = dict(otel_tables(otel)) if otel else {}
    sandbox: dict[KeyPath, Any] = {
        ("sandbox_workspace_write", "writable_roots"): [str(root)],
        ("sandbox_workspace_write", "exclude_tmpdir_env_var"): True,
        ("sandbox_workspace_write", "exclude_slash_tmp"): True,
    }
    try:
        return prepare_codex_home(
            spec.codex_home,
            root,
            driver="exec",
            base_config=spec.base_config,
            assign=sandbox,
            owned_tables=owned,
            agents_template=spec.prompt_file,
            agents_vars=spec.variables or {},
            agents_options=OPTIONS,
            environ=env,
        )
    except CodexHomeError as exc:
        raise WorkspaceError(str(exc)) from None


def _git_init(root: Path, environ: Mapping[str, str]) -> None:
    env = absolute_path_env(environ)
    git = shutil.which("git", path=env["PATH"]) if env["PATH"] else None
    if git is None:
        raise WorkspaceError(f"git is not on PATH, and the workspace {root} is not a repository yet; install git")
    try:
        done = run_captured([git, "init", "-q", str(root)], env=env, timeout=GIT_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise WorkspaceError(f"`git init` in {root} took longer than {GIT_TIMEOUT:.0f}s; check the disk") from None
    if done.returncode != 0:
        detail = " ".join(done.stderr.split())[:200]
        raise WorkspaceError(f"`git init` in {root} failed (exit {done.returncode}): {detail}")


def _exclude(root: Path) -> None:
    """List the home and the traces in ``.git/info/exclude`` (once; a worktree's ``.git`` file is left alone)."""
    git_dir = root / ".git"
    if not git_dir.is_dir():
        return
    exclude = git_dir / "info" / "exclude"
    try:
        existing = exclude.read_text(encoding="utf-8") if exclude.exists() else ""
        lines = existing.splitlines()
        missing = [entry for entry in EXCLUDED if entry not in lines]
        if missing:
            exclude.parent.mkdir(parents=True, exist_ok=True)
            separator = "" if not existing or existing.endswith("\n") else "\n"
            exclude.write_text(existing + separator + "".join(f"{entry}\n" for entry in missing), encoding="utf-8")
    except OSError as exc:
        raise WorkspaceError(f"cannot update {exclude}: {exc.strerror}") from None
