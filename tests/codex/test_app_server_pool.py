"""One shared ``codex app-server`` for many threads (:mod:`coven_codex.codex.appserver`), against the
real Codex CLI 0.169.0 and the scripted model server: routing by thread, approvals by thread,
closing one thread, and the death of the shared process as one event for every thread on it."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import psutil
import pytest
from codex_driver_helpers import CodexSetup, Recorder, make_setup, texts

from coven_codex.codex.appserver import AppServerPool
from coven_codex.codex.drivers import (
    AgentMessageCompleted,
    ApprovalRequested,
    CodexDriver,
    DriverFailed,
    ThreadStarted,
    TurnFinished,
    TurnStarted,
)
from coven_codex.codex.errors import ErrorCode
from coven_codex.testing import CallTool, Reply, ScriptedModelServer, Stall
from coven_codex.testing.model_server import RecordedRequest
from coven_codex.testing.responders import TurnScript, echo_responder, last_user_text, pending_tool_output

pytestmark = pytest.mark.codex
VERSION = "0.169.0"


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
            await asyncio.gather(*(d.submit(f"hello from {i}", f"t{i}") for i, d in enumerate(drivers)))
            for recorder in recorders:
                await recorder.wait_for(TurnFinished)
            for i, recorder in enumerate(recorders):
                assert texts(recorder.of(AgentMessageCompleted)) == [f"echo: hello from {i}"]
                assert [f.client_ids for f in recorder.of(TurnFinished)] == [(f"t{i}",)]
            # One thread closed: the process goes on serving the others.
            await drivers[0].aclose()
            assert pool.pids == [pid] and drivers[0].pids == []
            await drivers[1].submit("again", "t1b")
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
            await drivers[1].submit("run it", "r")
            (asked,) = await recorders[1].wait_for(ApprovalRequested)
            await drivers[0].submit("meanwhile", "m")
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
                await driver.submit(f"first {i}", f"f{i}")
                await recorders[i].wait_for(TurnFinished)
            await drivers[0].submit("slow a", "sa")
            await drivers[1].submit("slow b", "sb")
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

            again = [Recorder() for _ in threads]
            resumed = [setup.driver(recorder, pool=pool) for recorder in again]
            for driver, thread in zip(resumed, threads, strict=True):
                await driver.start(thread)
            (new_pid,) = pool.pids
            assert new_pid != pid
            for i, (driver, recorder) in enumerate(zip(resumed, again, strict=True)):
                (started,) = recorder.of(ThreadStarted)
                assert started.resumed and started.thread_id == threads[i]
                await driver.submit(f"after {i}", f"a{i}")
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
