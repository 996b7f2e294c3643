"""codex_processes (coven_codex/testing/processes.py): the living processes that inherited a
CODEX_HOME, the one helper the Codex tests use to see what a run left behind."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from coven_codex.testing.processes import codex_processes


def test_the_processes_of_a_codex_home_are_found_and_a_zombie_is_not(tmp_path: Path) -> None:
    home, other = tmp_path / "home", tmp_path / "other"
    env = {**os.environ, "CODEX_HOME": str(home)}
    child = subprocess.Popen(["sleep", "60"], env=env)
    stranger = subprocess.Popen(["sleep", "60"], env={**os.environ, "CODEX_HOME": str(other)})
    try:
        assert [p.pid for p in codex_processes(home)] == [child.pid]
        child.kill()
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # dead, not reaped: a zombie
        assert codex_processes(home) == []
        assert [p.pid for p in codex_processes(other)] == [stranger.pid]
    finally:
        for process in (child, stranger):
            process.kill()
            process.wait(timeout=10)
