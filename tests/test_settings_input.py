"""Settings input that must be refused or accumulated the same way by every command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from coven_codex.cli.main import build_parser
from coven_codex.cli.run import settings_from_args
from coven_codex.settings import SettingsError, load_settings

FLOAT_SETTINGS = (
    "turn_timeout",
    "stream_idle_timeout",
    "kill_grace",
    "idle_reap",
    "release_thread_after",
    "approval_timeout",
    "restart_backoff",
)


def coven(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coven_codex", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize("name", FLOAT_SETTINGS)
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_numbers_are_refused_in_coven_toml(tmp_path: Path, name: str, value: str) -> None:
    config = tmp_path / "coven.toml"
    config.write_text(f"{name} = {value}\n")
    with pytest.raises(SettingsError) as caught:
        load_settings(config)
    assert name in str(caught.value) and "finite" in str(caught.value)


@pytest.mark.parametrize("name", FLOAT_SETTINGS)
def test_non_finite_numbers_are_refused_as_flags(name: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(None, {name: float("nan")})
    assert name in str(caught.value)


@pytest.mark.parametrize("command", ["run", "validate"])
def test_nan_turn_timeout_flag_is_refused_by_the_command(tmp_path: Path, command: str) -> None:
    done = coven(
        command, "--workspace", str(tmp_path), "--config", str(_toml(tmp_path, "turn_timeout = nan")), cwd=tmp_path
    )
    assert done.returncode == 2, done.stderr
    assert "turn_timeout" in done.stderr and "finite" in done.stderr
    assert "using nan" not in done.stderr


def test_nan_turn_timeout_run_flag_is_refused(tmp_path: Path) -> None:
    done = coven(
        "run",
        "--workspace",
        str(tmp_path),
        "--journal",
        str(tmp_path / "j.jsonl"),
        "--turn-timeout",
        "nan",
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert "turn_timeout" in done.stderr and "finite" in done.stderr


def _toml(folder: Path, text: str) -> Path:
    path = folder / "coven.toml"
    path.write_text(text + "\n")
    return path


@pytest.mark.parametrize("command", ["run", "validate", "spells"])
def test_spells_flag_repeats_and_accumulates(command: str) -> None:
    parser, _ = build_parser()
    args = parser.parse_args([command, "--spells", "a:x", "--spells", "b:y", "c:z"])
    assert args.spells == ["a:x", "b:y", "c:z"]


def test_run_keeps_every_repeated_spells_flag(tmp_path: Path) -> None:
    parser, _ = build_parser()
    args = parser.parse_args(["run", "--workspace", str(tmp_path), "--spells", "a:x", "--spells", "b:y"])
    assert settings_from_args(args).spells == ["a:x", "b:y"]
