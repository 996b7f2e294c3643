"""``coven-codex web`` refusals: each says what is wrong and what to do, and exits 2."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)


def run_web(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "COVEN_WEB_TOKEN"} | (env or {})
    return subprocess.run(
        [sys.executable, "-m", "coven_codex", "web", *args],
        capture_output=True,
        text=True,
        timeout=30,
        env=environ,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def test_a_missing_journal_folder_is_refused(tmp_path: Path) -> None:
    result = run_web("--journal", str(tmp_path / "nowhere" / "j.jsonl"))
    assert result.returncode == 2 and "does not exist" in result.stderr and not result.stdout


def test_a_weak_or_unreadable_token_is_refused(tmp_path: Path) -> None:
    journal = str(tmp_path / "j.jsonl")
    result = run_web("--journal", journal, "--port", "0", env={"COVEN_WEB_TOKEN": "short"})
    assert result.returncode == 2 and "at least 16" in result.stderr
    result = run_web("--journal", journal, "--port", "0", "--token-file", str(tmp_path / "missing"))
    assert result.returncode == 2 and "cannot read the token file" in result.stderr
    (tmp_path / "token").write_text("has a space in it, too long\n")
    result = run_web("--journal", journal, "--port", "0", "--token-file", str(tmp_path / "token"))
    assert result.returncode == 2 and "without spaces" in result.stderr


def test_a_port_in_use_is_refused(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = run_web("--journal", str(tmp_path / "j.jsonl"), "--port", str(port))
    assert result.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "--port" in result.stderr
