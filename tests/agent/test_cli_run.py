"""``coven-codex run`` refuses what it cannot work with, saying what to do (no Codex is started)."""

from __future__ import annotations

import asyncio
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import tomlkit

from coven_codex.cli.main import build_parser
from coven_codex.cli.run import settings_from_args
from coven_codex.codex.home import API_KEY_VARIABLES
from coven_codex.settings import Settings
from coven_codex.testing.codex_config import DEFAULT_ENV_KEY, codex_config
from coven_codex.validate import filesystem_probes as fs
from coven_codex.validate.framework import ProbeContext, ProbeResult, Status


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coven_codex", "run", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


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
    assert done.returncode == 2
    assert f"workspace {tmp_path / 'nope'} does not exist" in done.stderr


def validate_says(probe: Callable[[ProbeContext], Awaitable[ProbeResult]], **settings: Any) -> ProbeResult:
    return asyncio.run(probe(ProbeContext(settings=Settings.model_validate(settings))))


def test_run_refuses_a_missing_journal_folder_in_validates_words(tmp_path: Path) -> None:
    journal = tmp_path / "no-such-folder" / "journal.jsonl"
    done = run("--workspace", str(tmp_path), "--journal", str(journal), cwd=tmp_path)
    said = validate_says(fs.probe_journal, workspace=tmp_path, journal=journal)
    assert said.status is Status.FAIL
    assert done.returncode == 2, done.stderr
    assert f"coven-codex run: {said.detail}\n  fix: {said.fix}" in done.stderr
    assert "ready" not in done.stderr


def test_run_refuses_an_unwritable_workspace_in_validates_words(tmp_path: Path) -> None:
    workspace = Path("/sys/kernel")  # a folder nobody may create files in, root included
    done = run("--workspace", str(workspace), "--journal", str(tmp_path / "j.jsonl"), cwd=tmp_path)
    said = validate_says(fs.probe_workspace, workspace=workspace)
    assert said.status is Status.FAIL and "not writable" in said.detail
    assert done.returncode == 2, done.stderr
    assert f"coven-codex run: {said.detail}\n  fix: {said.fix}" in done.stderr
    assert "Errno" not in done.stderr


def read_until(process: subprocess.Popen[bytes], marker: bytes, timeout: float) -> bytes:
    """Read the process's stderr until ``marker`` appears (raw reads: no buffer hides a line)."""
    assert process.stderr is not None
    fd = process.stderr.fileno()
    said = b""
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while marker not in said:
            left = deadline - time.monotonic()
            assert left > 0 and selector.select(left), f"no {marker!r} within {timeout:g} s: {said!r}"
            chunk = os.read(fd, 65536)
            assert chunk, f"exited before {marker!r}: {said!r}"
            said += chunk
    return said


def test_run_creates_the_journal_at_start_and_knows_provider_credentials(tmp_path: Path) -> None:
    """`--journal` is "created if missing" at start; a provider's env_key that is set counts as credentials."""
    workspace, home = tmp_path / "ws", tmp_path / "home"
    workspace.mkdir()
    home.mkdir()
    base = tmp_path / "base.toml"
    base.write_text(tomlkit.dumps(codex_config("http://127.0.0.1:9/v1")))
    journal = tmp_path / "chat" / "journal.jsonl"
    journal.parent.mkdir()
    env = {key: value for key, value in os.environ.items() if key not in API_KEY_VARIABLES}
    env.update({"HOME": str(home), DEFAULT_ENV_KEY: "offline"})
    env.pop("CODEX_HOME", None)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "coven_codex",
            "run",
            "--workspace",
            str(workspace),
            "--journal",
            str(journal),
            "--codex-config",
            str(base),
        ],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
    )
    try:
        said = read_until(process, b"ready (pid", timeout=60)
        assert journal.is_file()
    finally:
        process.send_signal(signal.SIGTERM)
        _, rest = process.communicate(timeout=60)
    log = (said + rest).decode()
    assert process.returncode == 0, log
    assert "no Codex credentials" not in log
    assert "(project-installed CLI)" in log or "(PATH)" in log or "(npm)" in log


def test_missing_codex_is_explained(tmp_path: Path) -> None:
    done = run(
        "--workspace",
        str(tmp_path),
        "--journal",
        str(tmp_path / "j.jsonl"),
        "--codex-path",
        str(tmp_path / "no-codex"),
        cwd=tmp_path,
    )
    assert done.returncode == 1
    assert "does not exist" in done.stderr and "codex_path" in done.stderr


def test_invalid_config_is_explained(tmp_path: Path) -> None:
    config = tmp_path / "coven.toml"
    config.write_text("max_sessions = 0\n")
    done = run("--config", str(config), cwd=tmp_path)
    assert done.returncode == 2
    assert "max_sessions" in done.stderr
