"""Start-up ends what a killed daemon left, including what those processes start meanwhile."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from coven_codex.agent.processes import ProcessRegistry, end_stale_processes, load_recorded
from coven_codex.codex.process import TREE_MARKER

# Like an orphaned `codex exec` node wrapper the daemon had not recorded yet: it starts its native
# binary (a child in its own group) a moment later, while the restarted daemon is ending strays.
LATE_STARTER = """
import subprocess, sys, time
time.sleep(0.3)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(child.pid, flush=True)
time.sleep(60)
"""


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_children_started_by_unrecorded_strays_during_cleanup_are_ended(tmp_path: Path) -> None:
    codex_home = tmp_path / ".codex"
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    env = {**os.environ, "CODEX_HOME": str(codex_home), TREE_MARKER: "stale-token"}
    # A recorded leader of the previous run (so start-up waits for it to settle) ...
    recorded = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env, start_new_session=True)
    # ... and an unrecorded one that starts a child during that wait.
    late = subprocess.Popen(
        [sys.executable, "-c", LATE_STARTER], env=env, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    child = None
    try:
        time.sleep(0.1)
        identity = {
            "pid": recorded.pid,
            "create_time": psutil.Process(recorded.pid).create_time(),
            "token": "stale-token",
        }
        (state_dir / "processes.json").write_text(json.dumps({"c": [identity]}))
        end_stale_processes(state_dir, grace=0.6, codex_home=codex_home)
        assert late.stdout is not None
        child_line = late.stdout.readline()
        assert child_line, "the late starter never started its child"
        child = int(child_line)
        time.sleep(0.05)
        assert not _running(recorded.pid) and not _running(late.pid)
        assert not _running(child), "a child started during clean-up outlived it"
    finally:
        if child is not None and _running(child):
            psutil.Process(child).kill()
        for proc in (recorded, late):
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        if late.stdout is not None:
            late.stdout.close()


def _victim(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env, start_new_session=True)


def _forge(state_dir: Path, *pids: int) -> None:
    records = [{"pid": pid, "create_time": psutil.Process(pid).create_time()} for pid in pids]
    (state_dir / "processes.json").write_text(json.dumps({"x": records}))


def test_a_recorded_process_without_our_tree_marker_is_left_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    codex_home = tmp_path / "home"
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    plain = {k: v for k, v in os.environ.items() if k not in (TREE_MARKER, "CODEX_HOME")}
    unmarked = _victim(plain)
    other_home = _victim({**plain, TREE_MARKER: "t", "CODEX_HOME": str(tmp_path / "other-home")})
    try:
        _forge(state_dir, unmarked.pid, other_home.pid)
        assert end_stale_processes(state_dir, grace=0.5, codex_home=codex_home) == []
        assert _running(unmarked.pid) and _running(other_home.pid)
        warnings = [r.getMessage() for r in caplog.records if "leaving them alone" in r.getMessage()]
        assert len(warnings) == 1 and str(unmarked.pid) in warnings[0]
    finally:
        for proc in (unmarked, other_home):
            proc.kill()
            proc.wait()


def test_a_leader_a_thousand_conversations_share_is_recorded_once_and_not_rewritten_per_conversation(
    tmp_path: Path,
) -> None:
    """Every conversation records the one shared app-server: the record names it once, and a
    conversation recording or forgetting it while others hold it writes nothing (issue 33: at
    1,000 conversations each record rewrote a file naming the leader 1,000 times)."""
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    registry = ProcessRegistry(state_dir)
    path = state_dir / "processes.json"
    leader = os.getpid()
    identity = {"pid": leader, "create_time": psutil.Process(leader).create_time()}
    registry.record("c0", [leader])
    assert json.loads(path.read_text()) == {"leaders": [identity]}
    path.unlink()
    for index in range(1, 1000):
        registry.record(f"c{index}", [leader])
    for index in range(999):
        registry.forget(f"c{index}")
    assert not path.exists(), "the file was rewritten though its leaders did not change"
    registry.forget("c999")
    assert json.loads(path.read_text()) == {"leaders": []}


def test_a_restart_finds_a_shared_leader_once(tmp_path: Path) -> None:
    codex_home = tmp_path / "home"
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    leader = subprocess.Popen(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
        env={**os.environ, TREE_MARKER: "t", "CODEX_HOME": str(codex_home)},
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert leader.stdout is not None
        assert leader.stdout.readline() == b"up\n"  # its environment is its own now (it runs Python)
        registry = ProcessRegistry(state_dir)
        for conversation in ("red", "blue", "green"):
            registry.record(conversation, [leader.pid])
        assert [process.pid for process in load_recorded(state_dir, codex_home)] == [leader.pid]
    finally:
        leader.kill()
        leader.wait()
        if leader.stdout is not None:
            leader.stdout.close()
