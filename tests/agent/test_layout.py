"""State and the isolated CODEX_HOME live outside the workspace; old in-workspace folders are moved."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from coven_codex.agent.state import SessionState, StateStore
from coven_codex.codex.home import MARKER_FILE, is_coven_codex_home, prepare_codex_home
from coven_codex.daemon.layout import LayoutError, migrate_legacy_layout
from coven_codex.settings import Settings, state_root
from coven_codex.support.statelock import StateLock


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "my project"
    path.mkdir()
    return path


def test_defaults_are_outside_the_workspace_and_keyed_by_it(
    tmp_path: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    settings = Settings(workspace=workspace)
    state = settings.resolved_state_dir
    assert state.parent == (tmp_path / "xdg" / "coven-codex").resolve()
    assert state.name.startswith("my_project-") and len(state.name) == len("my_project-") + 12
    assert settings.resolved_codex_home == state / "codex-home"
    assert not state.is_relative_to(workspace.resolve())
    other = tmp_path / "elsewhere" / "my project"
    other.mkdir(parents=True)
    assert Settings(workspace=other).resolved_state_dir != state  # same name, other path
    monkeypatch.delenv("XDG_STATE_HOME")
    assert state_root({"HOME": str(tmp_path / "h")}) == tmp_path / "h" / ".local" / "state" / "coven-codex"
    assert state_root({"HOME": str(tmp_path / "h"), "XDG_STATE_HOME": "relative"}).is_relative_to(tmp_path / "h")


def test_explicit_folders_keep_working(tmp_path: Path, workspace: Path) -> None:
    settings = Settings(workspace=workspace, state_dir=tmp_path / "s", codex_home=tmp_path / "c")
    assert settings.resolved_state_dir == (tmp_path / "s").resolve()
    assert settings.resolved_codex_home == (tmp_path / "c").resolve()
    assert (
        Settings(workspace=workspace, state_dir=tmp_path / "s").resolved_codex_home
        == (tmp_path / "s" / "codex-home").resolve()
    )


def _legacy(workspace: Path) -> tuple[Path, Path]:
    old_state, old_home = workspace / ".coven", workspace / ".codex"
    prepare_codex_home(old_home, workspace, driver="exec", environ={})
    (old_home / "sessions" / "2026").mkdir(parents=True)
    rollout = old_home / "sessions" / "2026" / "rollout-x-t1.jsonl"
    rollout.write_text("{}\n")
    store = StateStore(old_state, durability="never")
    store.prepare()
    store.save(SessionState(conversation="red", thread_id="t1", rollout_path=str(rollout.resolve())))
    store.close()
    (old_state / "processes.json").write_text("{}")
    return old_state, old_home


def test_old_folders_are_moved_once_and_rollout_paths_follow(workspace: Path, caplog: pytest.LogCaptureFixture) -> None:
    old_state, old_home = _legacy(workspace)
    settings = Settings(workspace=workspace)
    with caplog.at_level(logging.WARNING):
        migrate_legacy_layout(settings, workspace)
        migrate_legacy_layout(settings, workspace)  # the second start finds nothing to move
    assert not old_state.exists() and not old_home.exists()
    new_state, new_home = settings.resolved_state_dir, settings.resolved_codex_home
    assert (new_state / "processes.json").exists() and is_coven_codex_home(new_home)
    state = StateStore(new_state).load("red")
    assert state.rollout_path == str(new_home / "sessions" / "2026" / "rollout-x-t1.jsonl")
    assert Path(state.rollout_path).read_text() == "{}\n"
    moved = [r.getMessage() for r in caplog.records if r.getMessage().startswith("moved the")]
    assert len(moved) == 2 and "state folder" in moved[0] and "CODEX_HOME" in moved[1]


def test_a_codex_home_from_before_the_marker_is_recognised_by_its_header(workspace: Path) -> None:
    _, old_home = _legacy(workspace)
    (old_home / MARKER_FILE).unlink()
    assert is_coven_codex_home(old_home)
    migrate_legacy_layout(Settings(workspace=workspace), workspace)
    assert not old_home.exists()


def test_a_users_own_project_codex_folder_is_never_moved(workspace: Path) -> None:
    project = workspace / ".codex"
    project.mkdir()
    (project / "config.toml").write_text('model = "mine"\n')
    migrate_legacy_layout(Settings(workspace=workspace), workspace)
    assert (project / "config.toml").read_text() == 'model = "mine"\n'
    assert not Settings(workspace=workspace).resolved_codex_home.exists()


def test_both_old_and_new_state_folders_is_refused(workspace: Path) -> None:
    old_state, _ = _legacy(workspace)
    settings = Settings(workspace=workspace)
    settings.resolved_state_dir.mkdir(parents=True)
    with pytest.raises(LayoutError) as caught:
        migrate_legacy_layout(settings, workspace)
    message = str(caught.value)
    assert str(old_state) in message and str(settings.resolved_state_dir) in message and "state_dir" in message
    assert (old_state / "processes.json").exists()


def test_an_old_folder_in_use_by_a_running_daemon_is_not_moved(workspace: Path) -> None:
    old_state, _ = _legacy(workspace)
    with StateLock(old_state), pytest.raises(LayoutError, match="another coven-codex daemon"):
        migrate_legacy_layout(Settings(workspace=workspace), workspace)
    assert (old_state / "processes.json").exists()


def test_explicit_folders_are_not_migrated(tmp_path: Path, workspace: Path) -> None:
    old_state, old_home = _legacy(workspace)
    settings = Settings(workspace=workspace, state_dir=tmp_path / "s", codex_home=tmp_path / "c")
    migrate_legacy_layout(settings, workspace)
    assert old_state.exists() and old_home.exists()
    assert json.loads((old_state / "processes.json").read_text()) == {}
