"""Moving state out of the workspace: the folders older versions kept inside it.

Older versions kept the state directory in ``<workspace>/.coven`` and the isolated ``CODEX_HOME``
in ``<workspace>/.codex``. Both are writable by Codex's own commands (and by anyone who commits
to the workspace): a forged ``processes.json`` named processes to end, and ``config.toml`` names
the command Codex starts as the MCP server. The defaults are now outside the workspace
(:func:`coven_codex.settings.default_state_dir`, with ``codex-home`` inside it), and
:func:`migrate_legacy_layout` moves the old folders there on the first start, saying so once:

- ``<workspace>/.coven`` when ``state_dir`` is not set;
- ``<workspace>/.codex`` when ``codex_home`` is not set and the folder is coven's
  (:func:`coven_codex.codex.home.is_coven_codex_home`); a user's or a project's own ``.codex``
  is never touched. The rollout paths saved in the session state are rewritten to the new place.

A folder is moved only while its daemon lock can be taken (no old daemon still runs on it), and
never over an existing one: when both the old and the new folder exist, start-up stops and says
which to keep. Symbolic links are not followed, and not moved.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
from pathlib import Path

from coven_codex.agent.state import StateStore
from coven_codex.codex.home import is_coven_codex_home
from coven_codex.settings import Settings
from coven_codex.support.statelock import StateError, StateLock

log = logging.getLogger(__name__)

LEGACY_STATE_DIR = ".coven"
LEGACY_CODEX_HOME = ".codex"


class LayoutError(RuntimeError):
    """An old folder cannot be moved to its new place; the message says what to do."""


def migrate_legacy_layout(settings: Settings, workspace: Path) -> None:
    """Move ``<workspace>/.coven`` and a coven ``<workspace>/.codex`` to their defaults outside the
    workspace (see the module docstring); raise :class:`LayoutError`."""
    root = workspace.expanduser().resolve()
    if settings.state_dir is None:
        old_state = root / LEGACY_STATE_DIR
        if not old_state.is_symlink() and old_state.is_dir():
            _move(old_state, settings.resolved_state_dir, "state folder", "state_dir")
    if settings.codex_home is None:
        old_home = root / LEGACY_CODEX_HOME
        if is_coven_codex_home(old_home):
            new_home = settings.resolved_codex_home
            _move(old_home, new_home, "isolated CODEX_HOME", "codex_home")
            _rewrite_rollout_paths(settings.resolved_state_dir, old_home, new_home)


def _move(old: Path, new: Path, what: str, setting: str) -> None:
    if new.exists() or new.is_symlink():
        raise LayoutError(
            f"both the old {what} {old} (inside the workspace) and the new one {new} exist; keep one: "
            f"remove {old} if {new} is the one in use (or move it there in its place), or set "
            f'{setting} = "{old}" to keep using the old one'
        )
    try:
        with StateLock(old):
            new.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            shutil.move(old, new)
    except StateError as exc:
        raise LayoutError(f"cannot move the old {what} {old} to {new}: {exc}") from None
    except OSError as exc:
        raise LayoutError(
            f"cannot move the old {what} {old} to {new} ({exc}); move it there by hand, or set {setting}"
        ) from None
    log.warning("moved the %s from %s to %s: inside the workspace, Codex's commands could rewrite it", what, old, new)


def _rewrite_rollout_paths(state_dir: Path, old_home: Path, new_home: Path) -> None:
    """Point the rollout paths saved under the old CODEX_HOME at the same files in the new one."""
    store = StateStore(state_dir, durability="always")
    with contextlib.closing(store):
        for state in store.load_all().values():
            if state.rollout_path is None:
                continue
            path = Path(state.rollout_path)
            if path.is_relative_to(old_home):
                state.rollout_path = str(new_home / path.relative_to(old_home))
                store.save(state)
