"""A base Codex config or ``[codex]`` table that cannot be used is explained, not a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from coven_codex.codex.home import CodexHomeError, prepare_codex_home


def coven(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coven_codex", *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture
def not_toml(tmp_path: Path) -> Path:
    path = tmp_path / "base-config.toml"
    path.write_text("this is [not toml\n")
    return path


def test_run_explains_a_base_config_that_is_not_toml(tmp_path: Path, not_toml: Path, codex_bin_169: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    done = coven(
        "run",
        "--workspace",
        str(workspace),
        "--journal",
        str(tmp_path / "j.jsonl"),
        "--codex-path",
        str(codex_bin_169),
        "--codex-home",
        str(tmp_path / "home"),
        "--state-dir",
        str(tmp_path / "state"),
        "--codex-config",
        str(not_toml),
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert str(not_toml) in done.stderr and "not valid TOML" in done.stderr and "--codex-config" in done.stderr


def test_validate_explains_a_base_config_that_is_not_toml(tmp_path: Path, not_toml: Path, codex_bin_169: Path) -> None:
    done = coven(
        "validate",
        "--json",
        "--workspace",
        str(tmp_path),
        "--codex-path",
        str(codex_bin_169),
        "--codex-config",
        str(not_toml),
        cwd=tmp_path,
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert str(not_toml) in done.stdout and "not valid TOML" in done.stdout
    assert "cannot merge key  into" not in done.stdout


def test_run_explains_a_codex_table_that_cannot_be_merged(tmp_path: Path, codex_bin_169: Path) -> None:
    config = tmp_path / "coven.toml"
    config.write_text('[codex]\nprojects = "not a table"\n')
    workspace = tmp_path / "ws"
    workspace.mkdir()
    done = coven(
        "run",
        "--config",
        str(config),
        "--workspace",
        str(workspace),
        "--journal",
        str(tmp_path / "j.jsonl"),
        "--codex-path",
        str(codex_bin_169),
        "--codex-home",
        str(tmp_path / "home"),
        "--state-dir",
        str(tmp_path / "state"),
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "[codex] table of coven.toml" in done.stderr and "projects" in done.stderr


def test_run_explains_an_agents_template_variable_without_value(tmp_path: Path, codex_bin_169: Path) -> None:
    template = tmp_path / "agents.md"
    template.write_text("Team $TEAM_NAME\n")
    config = tmp_path / "coven.toml"
    config.write_text('agents_template = "agents.md"\n')
    workspace = tmp_path / "ws"
    workspace.mkdir()
    done = coven(
        "run",
        "--config",
        str(config),
        "--workspace",
        str(workspace),
        "--journal",
        str(tmp_path / "j.jsonl"),
        "--codex-path",
        str(codex_bin_169),
        "--codex-home",
        str(tmp_path / "home"),
        "--state-dir",
        str(tmp_path / "state"),
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "$TEAM_NAME" in done.stderr and "agents_vars" in done.stderr


def test_prepare_names_the_file_that_is_not_toml(tmp_path: Path, not_toml: Path) -> None:
    with pytest.raises(CodexHomeError, match="not valid TOML") as caught:
        prepare_codex_home(tmp_path / "home", tmp_path, driver="exec", base_config=not_toml, environ={})
    assert str(not_toml) in str(caught.value)
