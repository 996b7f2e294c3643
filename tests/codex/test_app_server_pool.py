"""One shared ``codex app-server`` for many threads (:mod:`coven_codex.codex.appserver`), against the
real Codex CLI 0.169.0 and the scripted model server: routing by thread, approvals by thread,
closing one thread, and the death of the shared process as one event for every thread on it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from codex_driver_helpers import CodexSetup, Recorder, make_setup, texts, thought
from test_idle_wakeups import inotify_watches, native_codex

from coven_codex.codex.appserver import AppServerPool
from coven_codex.codex.appserver.messages import LoadedThreads
from coven_codex.codex.appserver.pool import FDS_PER_THREAD, thread_budget
from coven_codex.codex.discovery import find_codex
from coven_codex.codex.drivers import (
    AgentMessageCompleted,
    ApprovalRequested,
    CodexDriver,
    DriverError,
    DriverFailed,
    ThreadStarted,
    TurnFinished,
    TurnStarted,
    killed_from_outside,
)
from coven_codex.codex.errors import ErrorCode
from coven_codex.codex.launch import resolve_launch
from coven_codex.testing import CallTool, Reply, ScriptedModelServer, Stall
from coven_codex.testing.mcp_echo_server import mcp_server_entry
from coven_codex.testing.model_server import RecordedRequest
from coven_codex.testing.processes import codex_processes
from coven_codex.testing.responders import TurnScript, echo_responder, last_user_text, pending_tool_output

pytestmark = pytest.mark.codex
VERSION = "0.169.0"
LOADED = 10
"""Threads kept loaded to count what each costs its process."""


def responder(request: RecordedRequest) -> TurnScript:
    """Echo; ``slow ...`` stalls (a turn to kill); ``run ...`` asks to run a command outside the sandbox."""
    if pending_tool_output(request) is not None:
        return echo_responder(request)
    text = last_user_text(request)
    if text.startswith("slow"):
        return (Stall(30.0), Reply("never"))
    if text.startswith("run"):
        return CallTool(
            "exec_command",
            {"cmd": "touch ran-it", "sandbox_permissions": "require_escalated", "justification": "the test"},
        )
    return echo_responder(request)


def tree(pid: int) -> list[psutil.Process]:
    leader = psutil.Process(pid)
    return [leader, *leader.children(recursive=True)]


async def open_drivers(setup: CodexSetup, pool: AppServerPool, count: int) -> tuple[list[CodexDriver], list[Recorder]]:
    recorders = [Recorder() for _ in range(count)]
    drivers = [setup.driver(recorder, pool=pool) for recorder in recorders]
    await asyncio.gather(*(driver.start(None) for driver in drivers))
    return drivers, recorders


async def close_all(drivers: list[CodexDriver], pool: AppServerPool) -> None:
    for driver in drivers:
        await driver.aclose()
    await pool.aclose()


async def test_many_threads_share_one_process_and_each_gets_only_its_own_events(
    tmp_path: Path, codex_bin_169: Path
) -> None:
    async with ScriptedModelServer(responder=responder) as server:
        setup = make_setup(tmp_path, codex_bin_169, VERSION, server, driver="app-server")
        pool = setup.pool()
        drivers, recorders = await open_drivers(setup, pool, 4)
        try:
            (pid,) = pool.pids
            assert all(driver.pids == [pid] for driver in drivers)
            assert len({driver.thread_id for driver in drivers}) == 4
            await asyncio.gather(*(d.submit(thought(f"hello from {i}", f"t{i}")) for i, d in enumerate(drivers)))
            for recorder in recorders:
                await recorder.wait_for(TurnFinished)
            for i, recorder in enumerate(recorders):
                assert texts(recorder.of(AgentMessageCompleted)) == [f"echo: hello from {i}"]
                assert [f.client_ids for f in recorder.of(TurnFinished)] == [(f"t{i}",)]
            # One thread closed: the process goes on serving the others.
            await drivers[0].aclose()
            assert pool.pids == [pid] and drivers[0].pids == []
            await drivers[1].submit(thought("again", "t1b"))
            await recorders[1].wait_for(TurnFinished, count=2)
            assert texts(recorders[1].of(AgentMessageCompleted))[-1] == "echo: again"
            assert len(recorders[2].of(TurnFinished)) == 1  # nothing of thread 1 reached thread 2
            processes = tree(pid)
        finally:
            await close_all(drivers, pool)
        assert pool.pids == []
        assert not [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


async def test_an_approval_reaches_only_the_thread_that_asked(tmp_path: Path, codex_bin_169: Path) -> None:
    async with ScriptedModelServer(responder=responder) as server:
        setup = make_setup(tmp_path, codex_bin_169, VERSION, server, driver="app-server")
        pool = setup.pool()
        drivers, recorders = await open_drivers(setup, pool, 2)
        try:
            await drivers[1].submit(thought("run it", "r"))
            (asked,) = await recorders[1].wait_for(ApprovalRequested)
            await drivers[0].submit(thought("meanwhile", "m"))
            await recorders[0].wait_for(TurnFinished)
            await drivers[1].answer_approval(asked.request_id, True)
            (finished,) = await recorders[1].wait_for(TurnFinished)
        finally:
            await close_all(drivers, pool)
        assert finished.ok and (setup.workspace / "ran-it").exists()
        assert recorders[0].of(ApprovalRequested) == []


async def test_killing_the_shared_process_is_one_event_for_every_thread_and_all_resume(
    tmp_path: Path, codex_bin_169: Path
) -> None:
    async with ScriptedModelServer(responder=responder) as server:
        setup = make_setup(tmp_path, codex_bin_169, VERSION, server, driver="app-server")
        pool = setup.pool(restart_backoff=0.2)
        drivers, recorders = await open_drivers(setup, pool, 3)
        resumed: list[CodexDriver] = []
        try:
            threads = [driver.thread_id for driver in drivers]
            for i, driver in enumerate(drivers):
                await driver.submit(thought(f"first {i}", f"f{i}"))
                await recorders[i].wait_for(TurnFinished)
            await drivers[0].submit(thought("slow a", "sa"))
            await drivers[1].submit(thought("slow b", "sb"))
            await recorders[0].wait_for(TurnStarted, count=2)
            await recorders[1].wait_for(TurnStarted, count=2)
            await server.requests.wait_for(5)  # both slow turns are in the model
            (pid,) = pool.pids
            victims = tree(pid)
            for process in victims:
                with contextlib.suppress(psutil.Error):
                    process.kill()
            failures = [(await r.wait_for(DriverFailed, timeout=30))[0] for r in recorders]
            await asyncio.sleep(0.5)  # a second report would have arrived by now
            assert [len(r.of(DriverFailed)) for r in recorders] == [1, 1, 1]
            assert [f.in_flight for f in failures] == [("sa",), ("sb",), ()]
            assert all(f.error.code is ErrorCode.PROCESS_EXITED for f in failures)
            assert not [p for p in victims if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
            assert pool.pids == []
            # A thought handed over now is refused with the kill's exit status, so the session
            # knows Codex was killed from outside and the thought is not to blame.
            with pytest.raises(DriverError) as refused:
                await drivers[2].submit(thought("too late", "late"))
            assert refused.value.returncode == -signal.SIGKILL

            again = [Recorder() for _ in threads]
            resumed = [setup.driver(recorder, pool=pool) for recorder in again]
            for driver, thread in zip(resumed, threads, strict=True):
                await driver.start(thread)
            (new_pid,) = pool.pids
            assert new_pid != pid
            for i, (driver, recorder) in enumerate(zip(resumed, again, strict=True)):
                (started,) = recorder.of(ThreadStarted)
                assert started.resumed and started.thread_id == threads[i]
                await driver.submit(thought(f"after {i}", f"a{i}"))
                await recorder.wait_for(TurnFinished)
                assert texts(recorder.of(AgentMessageCompleted)) == [f"echo: after {i}"]
        finally:
            await close_all([*drivers, *resumed], pool)
        # The model saw each thread's history: they really were resumed.
        last = {r.user_texts()[-1]: r.user_texts() for r in server.requests.responses_requests() if r.user_texts()}
        assert "first 2" in last["after 2"] and "slow a" in last["after 0"]


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_threads_opened_all_at_once_past_codexs_request_queue_all_open(
    tmp_path: Path, codex_bin_169: Path
) -> None:
    """300 conversations opening their thread on one app-server at the same moment: Codex refuses
    what overflows its request queue ("Server overloaded; retry later.", unprocessed), and every
    refused request is sent again until each thread is open (1,000 conversations at once in
    bench_scale met this as 'could not start Codex' for about a third of them)."""
    async with ScriptedModelServer(responder=responder) as server:
        setup = make_setup(tmp_path, codex_bin_169, VERSION, server, driver="app-server")
        pool = setup.pool()
        recorders = [Recorder() for _ in range(300)]
        drivers = [setup.driver(recorder, pool=pool, stream_idle_timeout=300.0) for recorder in recorders]
        try:
            outcomes = await asyncio.gather(*(driver.start(None) for driver in drivers), return_exceptions=True)
            assert [repr(o) for o in outcomes if o is not None][:3] == []
            assert len({driver.thread_id for driver in drivers}) == 300
        finally:
            await close_all(drivers, pool)


def test_thread_budget_follows_the_open_file_limit() -> None:
    assert thread_budget(1024) == 112
    assert thread_budget(384) == 32
    assert thread_budget(100) == 16  # never below a floor: a tiny limit fails loudly in Codex instead
    assert thread_budget(65536) > 8_000


def thread_fds(pid: int) -> list[str]:
    """What ``pid``'s descriptors name, but its SQLite databases': Codex's connection pools grow with
    concurrent requests up to their bound, whatever the threads (the budget's ``FD_RESERVE``)."""
    names = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(FileNotFoundError):
            names.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return [name for name in names if ".sqlite" not in name]


async def test_the_thread_budget_covers_a_loaded_thread_with_its_mcp_server(
    tmp_path: Path, codex_bin_169: Path
) -> None:
    """Every thread of the daemon has the spells' MCP server, a process Codex starts for it with its
    pipes: the descriptors a loaded thread costs its Codex process (its rollout, its lock, its MCP
    server's pipes and pidfd: 6 on 0.169.0) stay within the budget's :data:`FDS_PER_THREAD`, leaving
    one for what a starting thread holds for a moment (issue 33: at 6,
    300 conversations arriving over a minute filled a process at 149 threads to 1,024 descriptors and
    thread starts failed with 'No file descriptors available')."""
    async with ScriptedModelServer(responder=responder) as server:
        extra = {"mcp_servers": {"echo": mcp_server_entry()}}
        setup = make_setup(tmp_path, codex_bin_169, VERSION, server, driver="app-server", extra=extra)
        pool = setup.pool()
        drivers: list[CodexDriver] = []
        try:
            # The first thread opens what the process keeps whatever its threads (databases, logs).
            first, first_recorders = await open_drivers(setup, pool, 1)
            drivers += first
            await first[0].submit(thought("hi", "t0"))
            await first_recorders[0].wait_for(TurnFinished)
            (pid,) = pool.pids
            native = native_codex(pid)
            before = len(thread_fds(native))
            more, recorders = await open_drivers(setup, pool, LOADED)
            drivers += more
            await asyncio.gather(*(driver.submit(thought(f"hi {i}", f"t{i}")) for i, driver in enumerate(more)))
            for recorder in recorders:
                (finished,) = await recorder.wait_for(TurnFinished)
                assert finished.status == "completed", finished
            assert pool.pids == [pid]
            per_thread = (len(thread_fds(native)) - before) / LOADED
            assert per_thread <= FDS_PER_THREAD - 1, per_thread
        finally:
            await close_all(drivers, pool)


async def test_a_full_process_takes_no_new_thread_and_ends_when_its_threads_are_let_go(
    tmp_path: Path, codex_bin_169: Path
) -> None:
    """Codex keeps every thread it loaded open until it exits: after ``threads_per_process``
    threads a process is full, the next thread goes to a new process (even with ``size`` 1), and
    the full one ends once its last thread is closed: it is not kept warm."""
    async with ScriptedModelServer(responder=responder) as server:
        setup = make_setup(tmp_path, codex_bin_169, VERSION, server, driver="app-server")
        pool = AppServerPool(
            (str(setup.executable),),
            env=setup.home.env,
            cwd=setup.workspace,
            settings=setup.pool().settings,
            threads_per_process=3,
            keep_idle=600.0,
        )
        first, first_recorders = await open_drivers(setup, pool, 3)
        second, second_recorders = await open_drivers(setup, pool, 2)
        try:
            (old,) = {pid for driver in first for pid in driver.pids}
            (new,) = {pid for driver in second for pid in driver.pids}
            assert old != new and sorted(pool.pids) == sorted([old, new])
            await asyncio.gather(*(d.submit(thought(f"hi {i}", f"t{i}")) for i, d in enumerate(first + second)))
            for recorder in first_recorders + second_recorders:
                await recorder.wait_for(TurnFinished)
            for driver in first:
                await driver.aclose()
            assert pool.pids == [new]
            assert not psutil.pid_exists(old) or psutil.Process(old).status() == psutil.STATUS_ZOMBIE
        finally:
            await close_all(first + second, pool)


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_threads_past_one_processs_open_file_limit_are_all_served(tmp_path: Path, codex_bin_169: Path) -> None:
    """120 conversations, one turn each, under an open-file limit of 250 (inherited by Codex), in
    ``max_sessions``-like batches of 30 at a time, one conversation of each batch staying open:
    the pool's processes (the native binary, as the daemon starts it) take what their limit allows
    (``thread_budget(250)`` = 16 threads each) and every turn is served. One process for all of
    them (never empty, so never restarted) runs out of descriptors ('No file descriptors
    available') on the way."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert len(os.listdir("/proc/self/fd")) < 100  # the test process itself must fit under the limit
    resource.setrlimit(resource.RLIMIT_NOFILE, (250, hard))
    try:
        async with ScriptedModelServer(responder=responder) as server:
            setup = make_setup(tmp_path, codex_bin_169, VERSION, server, driver="app-server")
            # The native binary, as the daemon starts it (the Node wrapper would raise the limit).
            launch = resolve_launch(find_codex(str(codex_bin_169), setup.workspace), setup.home.env)
            assert launch.kind == "native"
            pool = AppServerPool(
                launch.command,
                env=launch.environment(setup.home.env),
                cwd=setup.workspace,
                settings=setup.pool().settings,
            )
            assert pool.threads_per_process == 16
            seen: set[int] = set()
            kept: list[CodexDriver] = []  # one conversation of each batch stays: no process ever runs empty
            try:
                for batch in range(4):
                    drivers, recorders = await open_drivers(setup, pool, 30)
                    try:
                        seen.update(pool.pids)
                        await asyncio.gather(
                            *(d.submit(thought(f"hi {batch}.{i}", f"t{i}")) for i, d in enumerate(drivers))
                        )
                        for i, recorder in enumerate(recorders):
                            (finished,) = await recorder.wait_for(TurnFinished)
                            assert finished.status == "completed", finished
                            assert texts(recorder.of(AgentMessageCompleted)) == [f"echo: hi {batch}.{i}"]
                    finally:
                        kept.append(drivers[0])
                        for driver in drivers[1:]:
                            await driver.aclose()
            finally:
                for driver in kept:
                    await driver.aclose()
                await pool.aclose()
            assert len(seen) >= 6
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def test_a_thread_is_resumed_on_the_process_that_still_has_it_loaded(tmp_path: Path, codex_bin_169: Path) -> None:
    """Codex keeps a thread it opened loaded, and the writer of its rollout, until it exits: a
    conversation that let its thread go and comes back must reopen it on that process, not on the
    least used one, which refuses it ("already has an active writer") so that the conversation
    lost its thread for a new one. Two processes (``app_servers = 2``); the thread's first process
    is the busier one when the conversation comes back."""
    async with ScriptedModelServer(responder=responder) as server:
        setup = make_setup(tmp_path, codex_bin_169, VERSION, server, driver="app-server")
        pool = setup.pool(size=2)
        first = Recorder()
        conversation = setup.driver(first, pool=pool)
        await conversation.start(None)
        others: list[CodexDriver] = []
        for _ in range(5):  # one at a time: the least used process takes each, alternately
            driver = setup.driver(Recorder(), pool=pool)
            await driver.start(None)
            others.append(driver)
        try:
            (home,) = conversation.pids
            assert len(set(pool.pids)) == 2
            elsewhere = [d for d in others if d.pids != [home]]
            for driver in elsewhere[1:]:  # the other process keeps one thread: it becomes the least used
                await driver.aclose()
            thread = conversation.thread_id
            await conversation.submit(thought("first", "c1"))
            await first.wait_for(TurnFinished)
            await conversation.aclose()
            users = {pid: sum(pid in d.pids for d in others) for pid in pool.pids}
            assert users[home] > min(users.values())  # the least used process is the other one
            again = Recorder()
            back = setup.driver(again, pool=pool)
            await back.start(thread)
            (started,) = again.of(ThreadStarted)
            assert (started.thread_id, started.resumed, started.note) == (thread, True, None)
            assert back.pids == [home]
            await back.submit(thought("second", "c2"))
            await again.wait_for(TurnFinished)
            assert texts(again.of(AgentMessageCompleted)) == ["echo: second"]
            others.append(back)
        finally:
            await close_all(others, pool)


@pytest.mark.parametrize("version", ["0.169.0", "0.147.0"])
async def test_a_thread_whose_rollout_was_replaced_is_resumed_from_it_once_its_process_is_unloaded(
    version: str, tmp_path: Path, codex_of: Callable[[str], Path]
) -> None:
    """A daemon of a cluster let a conversation go, another daemon continued its thread, and the
    first one takes it back with the other's rollout written over its own (docs/distributed.md).
    On 0.147 its process still has the thread loaded, from before: resumed there, the thread goes
    on from the history that process holds and appends to the file it opened, so the turn
    elsewhere is lost and nothing reaches the new file. :meth:`AppServerPool.unload` ends that
    process first (its other thread hears it ended). On 0.169 the process unloaded the thread
    when it was let go (``thread/loaded/list`` no longer names it): it is kept, with its other
    thread, and reads the new file on the resume. Either way the thread is resumed from the new
    file, with every turn."""
    for side in ("here", "there"):
        (tmp_path / side).mkdir()
    codex = codex_of(version)
    unloads_by_itself = version == "0.169.0"
    async with ScriptedModelServer(responder=responder) as server:
        here = make_setup(tmp_path / "here", codex, version, server, driver="app-server")
        there = make_setup(tmp_path / "there", codex, version, server, driver="app-server")
        pool, other_pool = here.pool(), there.pool()
        first, keeper = Recorder(), Recorder()
        conversation = here.driver(first, pool=pool)
        await conversation.start(None)
        neighbour = here.driver(keeper, pool=pool)  # another conversation keeps the process running
        await neighbour.start(None)
        drivers = [neighbour]
        try:
            thread = conversation.thread_id
            assert thread is not None
            (pid,) = pool.pids
            await conversation.submit(thought("first", "c1"))
            await first.wait_for(TurnFinished)
            await conversation.aclose()  # let go: 0.147 keeps it loaded; 0.169 unloads it
            (rollout,) = [r for r in here.rollouts() if thread in r.name]
            # Another daemon continues the thread from a copy of the rollout, in its own CODEX_HOME.
            copy = there.home.path / rollout.relative_to(here.home.path)
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_bytes(rollout.read_bytes())
            elsewhere = Recorder()
            continued = there.driver(elsewhere, pool=other_pool)
            await continued.start(thread)
            await continued.submit(thought("elsewhere", "c2"))
            await elsewhere.wait_for(TurnFinished)
            await close_all([continued], other_pool)
            # This daemon takes it back: the other's rollout over its own (a new file), then the unload.
            replaced = rollout.with_suffix(".new")
            replaced.write_bytes(copy.read_bytes())
            os.replace(replaced, rollout)
            if unloads_by_itself:
                await until_unloaded(pool, thread)
                assert not await pool.unload(thread)  # nothing to end: the process reads the new file
                assert pool.pids == [pid] and keeper.of(DriverFailed) == []
            else:
                assert await pool.unload(thread)
                (ended,) = await keeper.wait_for(DriverFailed)
                # The other thread on it is not to blame: a thought it was being handed is sent again
                # without counting against it (before: three unloads under lease churn dropped thoughts).
                assert killed_from_outside(ended.returncode)
            assert not await pool.unload(thread)  # (no process has it loaded any more)
            back, again = await resume(here, pool, thread, drivers)
            assert (back.pids == [pid]) == unloads_by_itself
            await back.submit(thought("third", "c3"))
            await again.wait_for(TurnFinished)
            (last,) = [r for r in server.requests.responses_requests() if r.user_texts()[-1:] == ["third"]]
            assert last.user_texts() == ["first", "elsewhere", "third"]
            assert b'"third"' in rollout.read_bytes()  # the new file is the one Codex appends to
        finally:
            await close_all(drivers, pool)


TURNS = ("first", "second", "third", "fourth", "fifth")


@pytest.mark.parametrize("version", ["0.169.0", "0.147.0"])
async def test_threads_let_go_and_resumed_at_once_keep_their_history(
    version: str, tmp_path: Path, codex_of: Callable[[str], Path]
) -> None:
    """Issue 12: eight conversations each let their thread go after every turn and come back at
    once (``release_thread_after = 0`` and the next thought), for five turns. Codex 0.169 unloads a
    thread let go, and until it says ``thread/closed`` it may refuse the resume with "no rollout
    found for thread id" although the rollout is on disk, and around that moment with "thread … is
    closing; retry after the thread is closed" (a wording the driver did not know); the driver then
    started a new thread, and the conversation's earlier turns were lost for the model (this test
    failed 3 runs of 4 before the first fix, and 1 loaded run of 3 before the second).
    Each thread is resumed, with its history. 0.147 keeps a thread let go loaded and never says
    ``thread/closed``: nothing is waited for there."""
    async with ScriptedModelServer(responder=responder) as server:
        setup = make_setup(tmp_path, codex_of(version), version, server, driver="app-server")
        pool = setup.pool(keep_idle=600.0)
        drivers, recorders = await open_drivers(setup, pool, 8)
        try:

            async def conversation(i: int) -> None:
                """The turns, the thread let go as soon as each is over and the next thought at once."""
                driver, recorder, thread = drivers[i], recorders[i], drivers[i].thread_id
                assert thread is not None
                for turn in TURNS:
                    if turn != TURNS[0]:
                        await driver.aclose()
                        driver, recorder = await resume(setup, pool, thread, drivers)
                    await driver.submit(thought(f"{turn} {i}", f"{turn}{i}"))
                    await recorder.wait_for(TurnFinished)

            await asyncio.gather(*(conversation(i) for i in range(len(recorders))))
            for i in range(len(recorders)):
                (last,) = [r for r in server.requests.responses_requests() if r.user_texts()[-1:] == [f"fifth {i}"]]
                assert last.user_texts() == [f"{turn} {i}" for turn in TURNS]
            (connection,) = pool.connections
            assert connection.unloads == (version == "0.169.0")
        finally:
            await close_all(drivers, pool)


async def resume(
    setup: CodexSetup, pool: AppServerPool, thread: str, drivers: list[CodexDriver]
) -> tuple[CodexDriver, Recorder]:
    """A new driver on ``pool`` that resumes ``thread`` (added to ``drivers``, to be closed); Codex resumed it."""
    recorder = Recorder()
    driver = setup.driver(recorder, pool=pool)
    drivers.append(driver)
    await driver.start(thread)
    (started,) = recorder.of(ThreadStarted)
    assert (started.thread_id, started.resumed) == (thread, True)
    return driver, recorder


async def until_unloaded(pool: AppServerPool, thread: str | None = None) -> None:
    """Wait (bounded) until no process of ``pool`` lists ``thread`` (None: any thread) as loaded:
    Codex unloads a let-go thread right after answering the unsubscribe."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20.0
    for connection in pool.connections:
        while True:
            listed = LoadedThreads.model_validate(await connection.request("thread/loaded/list", {}, within=10.0))
            if (thread in listed.data) if thread is not None else bool(listed.data):
                assert loop.time() < deadline, f"Codex still has the let-go thread loaded: {listed}"
                await asyncio.sleep(0.1)
                continue
            break


def test_the_daemon_raises_its_open_file_limit_to_the_hard_one_for_codex() -> None:
    """Under ``ulimit -Sn 1024`` with a higher hard limit the soft one is raised (Codex inherits
    it, so one process takes every thread); with ``ulimit -n 1024`` (both) nothing changes and the
    pool divides the threads among processes."""
    code = (
        "import resource; from coven_codex.codex.appserver.pool import raise_fd_limit, thread_budget; "
        "print(raise_fd_limit(), resource.getrlimit(resource.RLIMIT_NOFILE), thread_budget())"
    )
    raised = subprocess.run(
        ["prlimit", "--nofile=1024:4096", sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert raised.stdout.split() == ["(1024,", "4096)", "(4096,", "4096)", "496"]
    kept = subprocess.run(
        ["prlimit", "--nofile=1024:1024", sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert kept.stdout.split() == ["None", "(1024,", "1024)", "112"]


async def until(predicate: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Wait (bounded) until ``predicate`` holds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_a_prestarted_process_serves_the_first_thread(tmp_path: Path, codex_bin_169: Path) -> None:
    """The daemon starts the shared app-server ahead (while it recovers): it runs before any thread
    asks for it, and the first thread is opened on it, not on a second process."""
    async with ScriptedModelServer(responder=responder) as server:
        setup = make_setup(tmp_path, codex_bin_169, VERSION, server, driver="app-server")
        pool = setup.pool(keep_idle=600.0)
        pool.prestart()
        await until(lambda: bool(pool.pids), "the prestarted app-server")
        (warm,) = pool.pids
        drivers, recorders = await open_drivers(setup, pool, 1)
        try:
            assert drivers[0].pids == [warm] and pool.pids == [warm]
            await drivers[0].submit(thought("hello", "t1"))
            await recorders[0].wait_for(TurnFinished)
            assert texts(recorders[0].of(AgentMessageCompleted)) == ["echo: hello"]
        finally:
            await close_all(drivers, pool)


async def test_a_prestarted_process_no_thread_takes_ends_after_keep_idle(tmp_path: Path, codex_bin_169: Path) -> None:
    """Nobody taking the prestarted process within ``keep_idle`` seconds, it ends (as a warm one
    whose threads were let go does), and a later thread starts one as usual."""
    async with ScriptedModelServer(responder=responder) as server:
        setup = make_setup(tmp_path, codex_bin_169, VERSION, server, driver="app-server")
        pool = setup.pool(keep_idle=1.0)
        pool.prestart()
        await until(lambda: bool(pool.pids), "the prestarted app-server")
        (warm,) = pool.pids
        await until(lambda: not pool.pids and not codex_processes(setup.home.path), "the unused app-server to end")
        drivers, recorders = await open_drivers(setup, pool, 1)
        try:
            assert drivers[0].pids and drivers[0].pids != [warm]
            await drivers[0].submit(thought("later", "t1"))
            await recorders[0].wait_for(TurnFinished)
        finally:
            await close_all(drivers, pool)


async def test_a_failed_prestart_is_logged_once_and_the_first_thread_starts_codex_again(
    tmp_path: Path, codex_bin_169: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A prestart that fails is reported like a failed start (no thread, so only the log, saying
    what to do), once; the first thread then starts the app-server itself. The Codex here fails
    its first ``app-server`` start only."""
    async with ScriptedModelServer(responder=responder) as server:
        setup = make_setup(tmp_path, codex_bin_169, VERSION, server, driver="app-server")
        marker = tmp_path / "failed-once"
        wrapper = tmp_path / "codex-failing-once"
        wrapper.write_text(
            f'#!/bin/sh\nif [ ! -e "{marker}" ]; then touch "{marker}"; echo "simulated failure" >&2; exit 3; fi\n'
            f'exec "{setup.executable}" "$@"\n'
        )
        wrapper.chmod(0o755)
        pool = AppServerPool(
            (str(wrapper),),
            env=setup.home.env,
            cwd=setup.workspace,
            settings=setup.pool().settings,
            restart_backoff=0.1,
            keep_idle=600.0,
        )
        with caplog.at_level("WARNING", logger="coven_codex.codex.appserver.pool"):
            pool.prestart()
            await until(marker.exists, "the failing start")
            await until(
                lambda: any("ahead of the first thought" in r.getMessage() for r in caplog.records), "the warning"
            )
            assert not pool.pids
            drivers, recorders = await open_drivers(setup, pool, 1)
            try:
                await drivers[0].submit(thought("after the failure", "t1"))
                await recorders[0].wait_for(TurnFinished)
                assert texts(recorders[0].of(AgentMessageCompleted)) == ["echo: after the failure"]
            finally:
                await close_all(drivers, pool)
        warnings = [r.getMessage() for r in caplog.records if "ahead of the first thought" in r.getMessage()]
        assert len(warnings) == 1, warnings
        assert "started again when a thought needs it" in warnings[0]


async def test_closing_the_pool_while_it_prestarts_leaves_no_process(tmp_path: Path, codex_bin_169: Path) -> None:
    """The daemon stopping while the prestarted app-server is still starting: nothing is left."""
    async with ScriptedModelServer(responder=responder) as server:
        setup = make_setup(tmp_path, codex_bin_169, VERSION, server, driver="app-server")
        pool = setup.pool(keep_idle=600.0)
        pool.prestart()
        await until(lambda: bool(codex_processes(setup.home.path)), "the app-server's process")
        await pool.aclose()
        assert not pool.pids
        await until(lambda: not codex_processes(setup.home.path), "every process of the pool to end", timeout=15.0)


async def test_the_last_thread_let_go_leaves_its_process_warm_and_unwatched_for_the_next_thought(
    tmp_path: Path, codex_bin_169: Path
) -> None:
    """Issue 12: the pool keeps the process whose last thread was let go (warm) instead of ending
    it. Codex unloads the thread at once (generated ``thread_unload_delay_secs = 0``): nothing is
    loaded and nothing watched, so the machine's other processes no longer wake it. The next
    thought resumes the thread on that same process, with its history."""
    async with ScriptedModelServer(responder=responder) as server:
        setup = make_setup(tmp_path, codex_bin_169, VERSION, server, driver="app-server")
        pool = setup.pool(keep_idle=600.0)
        drivers, recorders = await open_drivers(setup, pool, 1)
        try:
            (pid,) = pool.pids
            native = native_codex(pid)
            thread = drivers[0].thread_id
            await drivers[0].submit(thought("before the release", "t1"))
            await recorders[0].wait_for(TurnFinished)
            assert inotify_watches(native)  # a loaded thread: its skill roots are watched
            await drivers[0].aclose()  # the conversation lets its thread go
            assert pool.pids == [pid] and pool.warm_pids == [pid]
            await until_unloaded(pool)  # thread/loaded/list is empty
            await until(lambda: inotify_watches(native) == [], "the let-go thread's watches to go", timeout=20.0)

            back, again = await resume(setup, pool, thread, drivers)
            assert back.pids == [pid] and pool.pids == [pid] and pool.warm_pids == []
            await back.submit(thought("after the release", "t2"))
            await again.wait_for(TurnFinished)
            assert texts(again.of(AgentMessageCompleted)) == ["echo: after the release"]
            last = server.requests.responses_requests()[-1]
            assert last.user_texts() == ["before the release", "after the release"]
        finally:
            await close_all(drivers, pool)
        assert pool.pids == []


async def test_a_warm_process_ends_after_keep_idle_with_no_thread(tmp_path: Path, codex_bin_169: Path) -> None:
    """The warm process is ended once it has had no thread for ``keep_idle`` seconds (the
    daemon's ``idle_reap``): an idle daemon still ends with no Codex process."""
    async with ScriptedModelServer(responder=responder) as server:
        setup = make_setup(tmp_path, codex_bin_169, VERSION, server, driver="app-server")
        pool = setup.pool(keep_idle=1.0)
        drivers, recorders = await open_drivers(setup, pool, 1)
        try:
            await drivers[0].submit(thought("hello", "t1"))
            await recorders[0].wait_for(TurnFinished)
            await drivers[0].aclose()
            await until(lambda: not pool.pids and not codex_processes(setup.home.path), "the warm app-server to end")
        finally:
            await close_all(drivers, pool)


async def test_one_process_at_most_is_kept_warm(tmp_path: Path, codex_bin_169: Path) -> None:
    """Of two processes whose threads are all let go, the first emptied is kept warm and the
    second is ended at once."""
    async with ScriptedModelServer(responder=responder) as server:
        setup = make_setup(tmp_path, codex_bin_169, VERSION, server, driver="app-server")
        pool = setup.pool(size=2, keep_idle=600.0)
        drivers, _ = await open_drivers(setup, pool, 2)
        try:
            (first,), (second,) = drivers[0].pids, drivers[1].pids
            assert first != second
            await drivers[0].aclose()
            await drivers[1].aclose()
            assert pool.pids == [first] and pool.warm_pids == [first]
            assert not psutil.pid_exists(second) or psutil.Process(second).status() == psutil.STATUS_ZOMBIE
        finally:
            await close_all(drivers, pool)
