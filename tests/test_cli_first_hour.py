"""The command line as a new user meets it: JSON that stays JSON, flags where users put them, hints."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from coven_codex.cli.main import build_parser
from coven_codex.settings import SettingsError, load_settings


def coven(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coven_codex", *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def test_validate_json_prints_json_when_the_config_is_invalid(tmp_path: Path) -> None:
    config = tmp_path / "coven.toml"
    config.write_text("max_sessions = 0\n")
    done = coven("validate", "--json", "--config", str(config), cwd=tmp_path)
    assert done.returncode == 2
    said = json.loads(done.stdout)
    assert said["ok"] is False and "max_sessions" in said["error"] and said["checks"] == []


def test_login_is_skipped_when_codex_cannot_say_its_version(tmp_path: Path) -> None:
    broken = tmp_path / "tools" / "codex"
    broken.parent.mkdir()
    broken.write_text("#!/bin/sh\nexit 3\n")
    broken.chmod(0o755)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    done = coven("validate", "--json", "--workspace", str(workspace), "--codex-path", str(broken), cwd=tmp_path)
    checks = {check["code"]: check for check in json.loads(done.stdout)["checks"]}
    assert checks["codex_version"]["status"] == "fail"
    assert checks["login"]["status"] == "skip" and "codex_version" in checks["login"]["detail"]


@pytest.mark.parametrize(
    ("argv", "level"),
    [
        (["validate", "--log-level", "DEBUG"], "DEBUG"),
        (["--log-level", "ERROR", "run"], "ERROR"),
        (["--log-level", "ERROR", "spells", "--log-level", "INFO"], "INFO"),
        (["chat", "--journal", "j"], None),
    ],
)
def test_log_level_is_accepted_before_and_after_the_subcommand(argv: list[str], level: str | None) -> None:
    parser, _ = build_parser()
    assert parser.parse_args(argv).log_level == level


def test_a_misspelled_setting_gets_the_nearest_known_one(tmp_path: Path) -> None:
    config = tmp_path / "coven.toml"
    config.write_text("max_session = 3\n")
    with pytest.raises(SettingsError, match=r"unknown setting max_session; did you mean max_sessions\?"):
        load_settings(config)


def test_chat_on_a_journal_no_daemon_serves_says_so(tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "coven_codex", "chat", "--journal", str(journal)],
        cwd=tmp_path,
        input="",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "no daemon serves it" in done.stderr and f"coven-codex run --journal {journal}" in done.stderr
