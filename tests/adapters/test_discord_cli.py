"""``coven-codex discord --config`` refuses a bad start with a message saying what to do, never the token."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

GOOD_SHAPE = "MTAwMDAwMDAwMDAwMDAwMDAwMQ.GabcDe.abcdefghijklmnopqrstuvwxyz012345"


def _run(tmp_path: Path, section: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DISCORD_BOT_TOKEN"}
    if token is not None:
        env["DISCORD_BOT_TOKEN"] = token
    config = tmp_path / "coven.toml"
    config.write_text(f'journal = "j.jsonl"\n\n{section}\n', encoding="utf-8")
    command = [sys.executable, "-m", "coven_codex.cli.main", "discord", "--config", str(config)]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize(
    ("section", "token", "message"),
    [
        ('[adapters.discord]\nallow_users = ["1"]', None, "the Discord bot token is missing: set the environment"),
        ('[adapters.discord]\nallow_users = ["1"]', "not-a-token", "does not hold the Discord bot token"),
        ("[adapters.discord]", GOOD_SHAPE, "[adapters.discord] allows nobody"),
        ('[adapters.discord]\nallow_roles = ["1"]', GOOD_SHAPE, "allow_roles"),
        ('[adapters.discord]\nallow_users = ["1"]\nallow_channels = []', GOOD_SHAPE, "allow_channels is empty"),
        (
            '[adapters.discord]\nallow_users = ["1"]\ntoken_file = "/nonexistent/token"',
            None,
            "cannot read the Discord bot token from token_file /nonexistent/token",
        ),
        (f'[adapters.discord]\nallow_users = ["1"]\ntoken = "{GOOD_SHAPE}"', None, "a token is never written"),
        ('[adapters.slack]\nallow_users = ["1"]', GOOD_SHAPE, "has no [adapters.discord] section"),
    ],
)
def test_bad_starts_are_refused(tmp_path: Path, section: str, token: str | None, message: str) -> None:
    result = _run(tmp_path, section, token=token)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "not-a-token" not in result.stderr and GOOD_SHAPE not in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "j.jsonl").exists()
