"""The exec driver against the real Codex CLI (0.47.0, and 0.169.0 which supports it too)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
import pytest
from codex_driver_helpers import Recorder, make_setup, texts, thought

from coven_codex.codex.drivers import (
    AgentMessageCompleted,
    DriverError,
    DriverFailed,
    ThreadStarted,
    TurnExpired,
    TurnFinished,
    TurnStarted,
)
from coven_codex.codex.drivers.exec import ExecDriver
from coven_codex.codex.errors import ErrorCode
from coven_codex.testing import HttpError, Reply, ScriptedModelServer, Stall

pytestmark = pytest.mark.codex


async def test_multi_turn_persists_the_thread_before_the_turn_ends(
    tmp_path: Path, codex_version: str, codex_bin: Path, recorder: Recorder
) -> None:
    async with ScriptedModelServer([(Stall(1.0), Reply("one done")), Reply("two done")]) as server:
        setup = make_setup(tmp_path, codex_bin, codex_version, server, driver="exec")
        driver = setup.driver(recorder, choice="exec")
        assert driver.kind == "exec"
        try:
            await driver.start(None)
            assert recorder.events == []  # exec learns the thread id from the first turn
            assert await driver.submit(thought("one", "t1")) == "started"
            (thread,) = await recorder.wait_for(ThreadStarted)
            assert recorder.of(TurnFinished) == []  # known (and delivered) while the turn runs
            assert not thread.resumed
            await recorder.wait_for(TurnFinished)
            assert await driver.submit(thought("two", "t2")) == "started"
            finished = await recorder.wait_for(TurnFinished, count=2)
        finally:
            await driver.aclose()
        assert [(f.status, f.client_ids) for f in finished] == [("completed", ("t1",)), ("completed", ("t2",))]
        assert texts(recorder.of(AgentMessageCompleted)) == ["one done", "two done"]
        assert len(recorder.of(ThreadStarted)) == 1  # the second turn resumed the same thread
        (rollout,) = setup.rollouts()
        assert thread.thread_id in rollout.name
        assert server.requests.responses_requests()[-1].user_texts()[:2] == ["one", "two"]


async def test_thoughts_mid_turn_are_queued_in_order(tmp_path: Path, codex_bin_047: Path, recorder: Recorder) -> None:
    async with ScriptedModelServer([(Stall(1.5), Reply("a")), Reply("b"), Reply("c")]) as server:
        setup = make_setup(tmp_path, codex_bin_047, "0.47.0", server, driver="exec")
        driver = setup.driver(recorder, mid_turn="steer")  # steering is impossible: queued
        try:
            await driver.start(None)
            await driver.submit(thought("first", "a"))
            await recorder.wait_for(TurnStarted)
            assert await driver.submit(thought("second", "b")) == "queued"
            assert await driver.submit(thought("third", "c")) == "queued"
            assert driver.queued == ("b", "c")
            finished = await recorder.wait_for(TurnFinished, count=3)
        finally:
            await driver.aclose()
        assert [f.client_ids for f in finished] == [("a",), ("b",), ("c",)]
        assert all(f.ok for f in finished)
        assert server.requests.turn_prompts() == ["first", "second", "third"]


async def test_cancel_ends_the_turn_and_the_queue_goes_on(
    tmp_path: Path, codex_version: str, codex_bin: Path, recorder: Recorder
) -> None:
    async with ScriptedModelServer([(Stall(30), Reply("never")), Reply("after")]) as server:
        setup = make_setup(tmp_path, codex_bin, codex_version, server, driver="exec")
        driver = setup.driver(recorder, kill_grace=2.0)
        try:
            await driver.start(None)
            assert await driver.cancel() is False
            await driver.submit(thought("long", "a"))
            await server.requests.wait_for(1)
            await driver.submit(thought("next", "b"))
            assert await driver.cancel() is True
            finished = await recorder.wait_for(TurnFinished, count=2, timeout=30)
        finally:
            await driver.aclose()
        assert [(f.status, f.client_ids) for f in finished] == [("interrupted", ("a",)), ("completed", ("b",))]
        assert texts(recorder.of(AgentMessageCompleted)) == ["after"]


async def test_model_401_is_a_classified_auth_error(
    tmp_path: Path, codex_version: str, codex_bin: Path, recorder: Recorder
) -> None:
    async with ScriptedModelServer([HttpError(401, "invalid api key", times=10)]) as server:
        setup = make_setup(tmp_path, codex_bin, codex_version, server, driver="exec")
        driver = setup.driver(recorder)
        try:
            await driver.start(None)
            await driver.submit(thought("hello", "a"))
            (finished,) = await recorder.wait_for(TurnFinished)
        finally:
            await driver.aclose()
        assert finished.status == "failed"
        assert finished.error is not None and finished.error.code is ErrorCode.AUTH, finished.error
        assert "401" in finished.error.message


async def test_turn_timeout_ends_the_process(tmp_path: Path, codex_bin_047: Path, recorder: Recorder) -> None:
    async with ScriptedModelServer([(Stall(30), Reply("late"))]) as server:
        setup = make_setup(tmp_path, codex_bin_047, "0.47.0", server, driver="exec")
        driver = setup.driver(recorder, turn_timeout=2.0, kill_grace=1.0)
        try:
            await driver.start(None)
            await driver.submit(thought("slow", "a"))
            (finished,) = await recorder.wait_for(TurnFinished, timeout=30)
        finally:
            await driver.aclose()
        assert finished.error is not None and finished.error.code is ErrorCode.OUTER_TIMEOUT
        (expired,) = recorder.of(TurnExpired)  # said before the process is ended
        assert expired.error == finished.error and recorder.events.index(expired) < recorder.events.index(finished)


@pytest.mark.parametrize("victim", ["native", "wrapper"])
async def test_kill_9_mid_turn_then_resume(
    tmp_path: Path, codex_bin_047: Path, recorder: Recorder, victim: str
) -> None:
    async with ScriptedModelServer(
        [Reply("remember 42"), (Stall(30), Reply("never")), Reply("resumed fine")]
    ) as server:
        setup = make_setup(tmp_path, codex_bin_047, "0.47.0", server, driver="exec")
        driver = setup.driver(recorder)
        try:
            await driver.start(None)
            await driver.submit(thought("first", "a"))
            await recorder.wait_for(TurnFinished)
            thread_id = driver.thread_id
            await driver.submit(thought("second", "b"))
            await server.requests.wait_for(2)
            leader = psutil.Process(driver.pids[0])
            tree = [leader, *leader.children(recursive=True)]
            target = leader if victim == "wrapper" else next(p for p in tree[1:] if "codex" in p.name())
            os.kill(target.pid, signal.SIGKILL)
            finished = await recorder.wait_for(TurnFinished, count=2, timeout=30)
            for process in tree:
                assert not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
            # the driver goes on: the next thought resumes the same thread in a new process
            await driver.submit(thought("third", "c"))
            finished = await recorder.wait_for(TurnFinished, count=3, timeout=30)
        finally:
            await driver.aclose()
        killed = finished[1]
        assert killed.status == "failed" and killed.client_ids == ("b",)
        assert killed.error is not None and killed.error.code is ErrorCode.PROCESS_EXITED
        assert "killed by signal 9" in killed.error.message or "exit" in killed.error.message
        assert finished[2].ok and driver.thread_id == thread_id
        assert texts(recorder.of(AgentMessageCompleted))[-1] == "resumed fine"
        assert "first" in server.requests.responses_requests()[-1].user_texts()


async def test_restart_resumes_the_persisted_thread(tmp_path: Path, codex_bin_047: Path, recorder: Recorder) -> None:
    async with ScriptedModelServer([Reply("one"), Reply("two")]) as server:
        setup = make_setup(tmp_path, codex_bin_047, "0.47.0", server, driver="exec")
        first = setup.driver(recorder)
        try:
            await first.start(None)
            await first.submit(thought("hello", "a"))
            (thread,) = await recorder.wait_for(ThreadStarted)
            await recorder.wait_for(TurnFinished)
        finally:
            await first.aclose()
        again = Recorder()
        second = setup.driver(again)
        try:
            await second.start(thread.thread_id)
            await second.submit(thought("again", "b"))
            (finished,) = await again.wait_for(TurnFinished)
        finally:
            await second.aclose()
        (resumed,) = again.of(ThreadStarted)
        assert resumed == ThreadStarted(thread.thread_id, resumed=True)
        assert finished.ok
        assert len(setup.rollouts()) == 1


async def test_resuming_an_unknown_thread_is_noticed(tmp_path: Path, codex_bin_047: Path, recorder: Recorder) -> None:
    async with ScriptedModelServer([Reply("fresh")]) as server:
        setup = make_setup(tmp_path, codex_bin_047, "0.47.0", server, driver="exec")
        driver = setup.driver(recorder)
        unknown = "01a20262-0000-7000-8000-000000000000"
        try:
            await driver.start(unknown)
            await driver.submit(thought("hi", "a"))
            await recorder.wait_for(TurnFinished)
        finally:
            await driver.aclose()
        (thread,) = recorder.of(ThreadStarted)
        assert thread.thread_id != unknown and not thread.resumed
        assert thread.note and unknown in thread.note


async def test_no_approvals_and_closed_driver(tmp_path: Path, codex_bin_047: Path, recorder: Recorder) -> None:
    async with ScriptedModelServer([]) as server:
        setup = make_setup(tmp_path, codex_bin_047, "0.47.0", server, driver="exec")
        driver = setup.driver(recorder)
        await driver.start(None)
        with pytest.raises(DriverError, match="already started"):
            await driver.start("another-thread")
        assert driver.thread_id is None
        with pytest.raises(DriverError, match="never asks for approval"):
            await driver.answer_approval("x", True)
        await driver.aclose()
        await driver.aclose()
        with pytest.raises(DriverError, match="not running"):
            await driver.submit(thought("late", "z"))


async def test_silent_model_is_a_stream_idle_error(tmp_path: Path, codex_bin_047: Path, recorder: Recorder) -> None:
    async with ScriptedModelServer([(Stall(30), Reply("late")), Reply("next")]) as server:
        setup = make_setup(tmp_path, codex_bin_047, "0.47.0", server, driver="exec")
        driver = setup.driver(recorder, stream_idle_timeout=2.0, kill_grace=1.0)
        try:
            await driver.start(None)
            await driver.submit(thought("slow", "a"))
            await driver.submit(thought("then this", "b"))
            finished = await recorder.wait_for(TurnFinished, count=2, timeout=30)
        finally:
            await driver.aclose()
        assert finished[0].error is not None and finished[0].error.code is ErrorCode.STREAM_IDLE
        assert finished[1].ok


async def test_a_bug_in_a_driver_task_fails_the_driver_instead_of_vanishing(
    tmp_path: Path, codex_bin_047: Path, recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: ExecDriver, turn: object, event: object) -> None:
        raise RuntimeError("bug in event handling")

    monkeypatch.setattr(ExecDriver, "_on_event", broken)
    async with ScriptedModelServer([Reply("a"), Reply("b")]) as server:
        setup = make_setup(tmp_path, codex_bin_047, "0.47.0", server, driver="exec")
        driver = setup.driver(recorder)
        try:
            await driver.start(None)
            await driver.submit(thought("first", "a"))
            assert await driver.submit(thought("second", "b")) == "queued"
            (failed,) = await recorder.wait_for(DriverFailed, timeout=30)
            assert "internal error in the exec driver" in failed.error.message
            assert "bug in event handling" in failed.error.message
            assert failed.in_flight == ("a",) and failed.undelivered == ("b",)
            assert driver.failed is failed.error
            with pytest.raises(DriverError, match="driver failed"):
                await driver.submit(thought("third", "c"))
        finally:
            await driver.aclose()
        assert not [p for p in psutil.process_iter() if p.pid in driver.pids]
