"""Process trees: own group, TERM then KILL after the grace, escaped descendants swept."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from coven_codex.codex.process import ChildProcess, spawn, terminate_tree

PY = sys.executable


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def read_pids(proc: ChildProcess, count: int) -> list[int]:
    assert proc.process.stdout is not None
    pids = []
    for _ in range(count):
        line = await asyncio.wait_for(proc.process.stdout.readline(), 10)
        pids.append(int(line))
    return pids


async def test_own_process_group_and_polite_termination(tmp_path: Path) -> None:
    proc = await spawn(
        [PY, "-c", "import os,time; print(os.getpid(), flush=True); time.sleep(60)"], env=os.environ, cwd=tmp_path
    )
    (pid,) = await read_pids(proc, 1)
    assert os.getpgid(pid) == pid != os.getpgid(0)
    started = time.monotonic()
    code = await terminate_tree(proc, grace=5)
    assert time.monotonic() - started < 4
    assert code == -15
    assert not alive(pid)


async def test_kill_after_grace_when_term_is_ignored(tmp_path: Path) -> None:
    script = (
        "import os,signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print(os.getpid(), flush=True); time.sleep(60)"
    )
    proc = await spawn([PY, "-c", script], env=os.environ, cwd=tmp_path)
    await read_pids(proc, 1)
    started = time.monotonic()
    code = await terminate_tree(proc, grace=0.5)
    assert 0.4 < time.monotonic() - started < 5
    assert code == -9


ESCAPER = """
import os, subprocess, sys, time
# a grandchild in the same group, and one that escapes into its own session (setsid)
same = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
escaped = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
print(same.pid, flush=True)
print(escaped.pid, flush=True)
time.sleep(60)
"""


async def test_escaped_descendants_are_swept(tmp_path: Path) -> None:
    proc = await spawn([PY, "-c", ESCAPER], env=os.environ, cwd=tmp_path)
    same, escaped = await read_pids(proc, 2)
    assert os.getpgid(escaped) != proc.pid
    await terminate_tree(proc, grace=2)
    for pid in (proc.pid, same, escaped):
        assert not alive(pid), pid


async def test_group_members_outliving_a_killed_leader_are_ended(tmp_path: Path) -> None:
    # like `kill -9` of Codex's node wrapper: the native child lives on in the group
    proc = await spawn([PY, "-c", ESCAPER], env=os.environ, cwd=tmp_path)
    same, escaped = await read_pids(proc, 2)
    os.kill(proc.pid, 9)
    await proc.wait_exit()
    assert alive(same)
    await terminate_tree(proc, grace=1)
    assert not alive(same)
    assert not alive(escaped)


async def test_terminating_twice_is_harmless(tmp_path: Path) -> None:
    proc = await spawn([PY, "-c", "print(1)"], env=os.environ, cwd=tmp_path)
    await proc.wait_exit()
    assert await terminate_tree(proc, grace=1) == 0
    assert await terminate_tree(proc, grace=1) == 0


# Like Codex 0.169's login-shell snapshot running pyenv's rehash: an escaped shell that keeps
# forking short-lived children, so new ones appear while the tree is being killed.
FORKER = """
import subprocess, sys, time
loop = "while true; do sleep 0.5 & done"  # forks without pause; each child lives 0.5 s
forker = subprocess.Popen(["/bin/sh", "-c", loop], start_new_session=True)
print(forker.pid, flush=True)
time.sleep(60)
"""


async def test_children_forked_during_the_kill_are_swept_too(tmp_path: Path) -> None:
    from coven_codex.codex.process import marked_processes

    for _ in range(5):  # the race needs a fork between listing and killing; give it chances
        proc = await spawn([PY, "-c", FORKER], env=os.environ, cwd=tmp_path)
        (forker,) = await read_pids(proc, 1)
        await asyncio.sleep(0.1)
        await terminate_tree(proc, grace=0.2)
        assert not alive(forker)
        leftovers = [p for p in marked_processes(proc.tree_token) if p.status() != psutil.STATUS_ZOMBIE]
        assert not leftovers, [p.cmdline() for p in leftovers]


SUBREAPER_PROBE = """
import asyncio, ctypes, os, sys
from pathlib import Path
from coven_codex.codex.process import spawn, terminate_tree

def is_subreaper() -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    flag = ctypes.c_int(0)
    libc.prctl(37, ctypes.byref(flag), 0, 0, 0)  # PR_GET_CHILD_SUBREAPER
    return flag.value

async def main() -> None:
    before = is_subreaper()
    child = await spawn(["true"], env=dict(os.environ), cwd=Path.cwd())
    await terminate_tree(child, 1.0)
    print(before, is_subreaper())

asyncio.run(main())
"""


def test_whoever_starts_a_tree_becomes_the_subreaper_of_its_orphans(tmp_path: Path) -> None:
    # Before: only the daemon did; a driver used by another process (coven-codex exec, the driver
    # tests) left orphans to init, and under load the snapshot shell outlived the tree's end.
    done = subprocess.run(
        [sys.executable, "-c", SUBREAPER_PROBE], capture_output=True, text=True, cwd=tmp_path, timeout=60, check=True
    )
    assert done.stdout.split() == ["0", "1"]
