"""``coven-codex run`` refuses what it cannot work with, saying what to do (no Codex is started)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from coven_codex.cli.main import build_parser
from coven_codex.cli.run import settings_from_args


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "coven_codex", "run", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=60, check=False)


def test_flags_win_over_the_config_file_which_wins_over_defaults(tmp_path: Path) -> None:
    config = tmp_path / "coven.toml"
    config.write_text('max_sessions = 3\nidle_reap = 60.0\njournal = "j.jsonl"\nturn_timeout = 5\n')
    parser, _ = build_parser()
    args = parser.parse_args(["run", "--config", str(config), "--max-sessions", "5"])
    settings = settings_from_args(args)
    assert settings.max_sessions == 5  # flag
    assert settings.idle_reap == 60.0  # file
    assert settings.journal == tmp_path / "j.jsonl"  # file, relative to the file
    assert settings.turn_timeout == 30.0  # clamped
    assert settings.kill_grace == 5.0  # default


def test_missing_journal_is_explained(tmp_path: Path) -> None:
    done = run("--workspace", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 1
    assert "--journal" in done.stderr


def test_missing_workspace_is_explained(tmp_path: Path) -> None:
    done = run("--workspace", str(tmp_path / "nope"), "--journal", str(tmp_path / "j.jsonl"), cwd=tmp_path)
    assert done.returncode == 1
    assert "not a directory" in done.stderr


def test_missing_codex_is_explained(tmp_path: Path) -> None:
    done = run("--workspace", str(tmp_path), "--journal", str(tmp_path / "j.jsonl"),
               "--codex-path", str(tmp_path / "no-codex"), cwd=tmp_path)
    assert done.returncode == 1
    assert "does not exist" in done.stderr and "codex_path" in done.stderr


def test_invalid_config_is_explained(tmp_path: Path) -> None:
    config = tmp_path / "coven.toml"
    config.write_text("max_sessions = 0\n")
    done = run("--config", str(config), cwd=tmp_path)
    assert done.returncode == 2
    assert "max_sessions" in done.stderr
