"""``coven-codex run`` and ``coven.toml`` with a Redis journal: the name is kept, an unreachable Redis refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from coven_codex.cli.main import build_parser
from coven_codex.cli.run import settings_from_args
from coven_codex.testing.redis_server import free_port


def test_a_redis_journal_name_is_kept_from_the_command_line_and_the_config_file(tmp_path: Path) -> None:
    name = "redis://:pw@10.0.0.5:6380/2?key=team:chat"
    parser, _ = build_parser()
    assert settings_from_args(parser.parse_args(["run", "--journal", name])).journal == name
    config = tmp_path / "coven.toml"
    config.write_text(f'journal = "{name}"\n')
    assert settings_from_args(parser.parse_args(["run", "--config", str(config)])).journal == name
    config.write_text('journal = "chat.jsonl"\n')
    assert settings_from_args(parser.parse_args(["run", "--config", str(config)])).journal == tmp_path / "chat.jsonl"


def test_run_refuses_a_redis_it_cannot_reach(tmp_path: Path) -> None:
    name = f"redis://127.0.0.1:{free_port()}/0?key=chat"
    done = subprocess.run(
        [sys.executable, "-m", "coven_codex", "run", "--workspace", str(tmp_path), "--journal", name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert f"coven-codex run: cannot reach Redis at {name}" in done.stderr
    assert "fix: Start Redis" in done.stderr
