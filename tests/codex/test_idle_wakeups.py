"""A shared ``codex app-server`` whose threads were all let go stops waking up (docs/performance.md,
"Scale"), against the real Codex CLI 0.169.0 and the scripted model server.

Codex's skills watcher watches, for every loaded thread, ``/etc`` (for the missing
``/etc/codex/skills``) and ``$HOME`` (for ``$HOME/.agents/skills``) with an inotify mask that
includes ``IN_OPEN``: every process started anywhere on the machine opens ``/etc/ld.so.cache``
and wakes Codex. A thread coven lets go (``thread/unsubscribe``) kept those watches for another
60 s (Codex's default ``thread_unload_delay_secs``); the generated config sets it to 0, so
Codex unloads the thread, and drops its watches, at once.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import psutil
import pytest
from codex_driver_helpers import Recorder, make_setup, thought

from coven_codex.codex.drivers import TurnFinished
from coven_codex.testing import ScriptedModelServer
from coven_codex.testing.responders import echo_responder

pytestmark = [pytest.mark.codex, pytest.mark.slow, pytest.mark.serial]
VERSION = "0.169.0"
STARTS = 1000
"""Processes started on the machine while the wake-ups of Codex are counted."""
UNLOAD_BOUND = 20.0
"""Seconds the threads get to be unloaded after they are let go: at once with the generated
config, 60 s with Codex's default."""


def native_codex(leader: int) -> int:
    """The process of the app-server tree that holds inotify instances (Codex itself, not its
    Node wrapper)."""
    for process in [psutil.Process(leader), *psutil.Process(leader).children(recursive=True)]:
        if inotify_watches(process.pid) or inotify_fds(process.pid):
            return process.pid
    raise AssertionError(f"no process under {leader} has an inotify instance")


def inotify_fds(pid: int) -> list[str]:
    """The descriptors of ``pid`` that are inotify instances."""
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:inotify":
                found.append(fd)
        except OSError:
            continue
    return found


def inotify_watches(pid: int) -> list[int]:
    """The inode numbers every inotify instance of ``pid`` watches (``/proc/PID/fdinfo``)."""
    inodes = []
    for fd in inotify_fds(pid):
        with open(f"/proc/{pid}/fdinfo/{fd}") as info:
            for line in info:
                if line.startswith("inotify "):
                    fields = dict(part.split(":", 1) for part in line.split()[1:])
                    inodes.append(int(fields["ino"], 16))
    return inodes


def wakeups(pid: int) -> int:
    """Voluntary context switches of every thread of ``pid`` so far: how often it slept and woke."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/status") as status:
                for line in status:
                    if line.startswith("voluntary_ctxt_switches:"):
                        total += int(line.split()[1])
        except OSError:
            continue  # (a thread that ended meanwhile)
    return total


async def wakeups_while_starting_processes(pid: int) -> int:
    """Wake-ups of ``pid`` while :data:`STARTS` short processes start one after another."""
    before = wakeups(pid)
    loop = f"i=0; while [ $i -lt {STARTS} ]; do /bin/true; i=$((i+1)); done"
    shell = await asyncio.create_subprocess_exec("sh", "-c", loop)
    await asyncio.wait_for(shell.wait(), 300)
    return wakeups(pid) - before


async def test_threads_let_go_are_unloaded_and_codex_sleeps_through_other_processes(
    tmp_path: Path, codex_bin_169: Path
) -> None:
    etc = os.stat("/etc").st_ino
    async with ScriptedModelServer(responder=echo_responder) as server:
        setup = make_setup(tmp_path, codex_bin_169, VERSION, server, driver="app-server")
        pool = setup.pool()
        keeper = await pool.connect()  # holds the process while its threads come and go
        recorders = [Recorder(), Recorder()]
        drivers = [setup.driver(recorder, pool=pool) for recorder in recorders]
        try:
            for i, (driver, recorder) in enumerate(zip(drivers, recorders, strict=True)):
                await driver.start(None)
                await driver.submit(thought(f"hello {i}", f"t{i}"))
                await recorder.wait_for(TurnFinished)
            (leader,) = pool.pids
            pid = native_codex(leader)
            # Loaded threads: /etc is watched, and other processes' starts wake Codex up.
            assert etc in inotify_watches(pid)
            loaded_wakeups = await wakeups_while_starting_processes(pid)
            assert loaded_wakeups >= STARTS // 2, loaded_wakeups

            for driver in drivers:  # let both threads go (thread/unsubscribe); the process stays
                await driver.aclose()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + UNLOAD_BOUND
            while True:
                listed = await keeper.request("thread/loaded/list", {}, within=10.0)
                assert isinstance(listed, dict)
                if listed.get("data") == []:
                    break
                assert loop.time() < deadline, f"Codex still has the let-go threads loaded: {listed}"
                await asyncio.sleep(0.1)

            assert inotify_watches(pid) == []
            idle_wakeups = await wakeups_while_starting_processes(pid)
            assert idle_wakeups < STARTS // 4, (idle_wakeups, loaded_wakeups)
        finally:
            for driver in drivers:
                await driver.aclose()
            await pool.release(keeper)
            await pool.aclose()
