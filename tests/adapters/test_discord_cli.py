"""``coven-codex discord`` refuses a bad start with a message saying what to do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

GOOD_SHAPE = "MTAwMDAwMDAwMDAwMDAwMDAwMQ.GabcDe.abcdefghijklmnopqrstuvwxyz012345"


def _run(tmp_path: Path, *args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DISCORD_BOT_TOKEN"}
    if token is not None:
        env["DISCORD_BOT_TOKEN"] = token
    command = [sys.executable, "-m", "coven_codex.cli.main", "discord", "--journal", str(tmp_path / "j.jsonl"), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize(
    ("args", "token", "message"),
    [
        (("--allow-user", "1"), None, "no bot token: set DISCORD_BOT_TOKEN"),
        (("--allow-user", "1"), "not-a-token", "does not hold a Discord bot token"),
        ((), GOOD_SHAPE, "nobody is allowed"),
        (("--allow-user", "1", "--token-file", "/nonexistent/token"), None, "cannot read the token file"),
    ],
)
def test_bad_starts_are_refused(tmp_path: Path, args: tuple[str, ...], token: str | None, message: str) -> None:
    result = _run(tmp_path, *args, token=token)
    assert result.returncode == 2
    assert message in result.stderr
    assert "not-a-token" not in result.stderr
    assert not (tmp_path / "j.jsonl").exists()
