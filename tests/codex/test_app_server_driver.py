"""The app-server driver against the real Codex CLI 0.169.0 and the scripted model server."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import psutil
import pytest
from codex_driver_helpers import Recorder, make_setup, texts, thought

from coven_codex.codex.drivers import (
    AgentMessageCompleted,
    ApprovalRequested,
    ApprovalResolved,
    Delta,
    DriverError,
    DriverFailed,
    ThreadStarted,
    TurnExpired,
    TurnFinished,
    TurnStarted,
)
from coven_codex.codex.errors import ErrorCode
from coven_codex.testing import CallTool, HttpError, Reply, ScriptedModelServer, Stall
from coven_codex.testing.mcp_echo_server import mcp_server_entry

pytestmark = pytest.mark.codex
VERSION = "0.169.0"


def escalated(command: str) -> CallTool:
    """A shell command the model asks to run outside the sandbox: Codex must ask for approval."""
    return CallTool(
        "exec_command",
        {"cmd": command, "sandbox_permissions": "require_escalated", "justification": "the test needs it"},
    )


async def test_multi_turn_with_deltas_and_client_ids(tmp_path: Path, codex_bin_169: Path, recorder: Recorder) -> None:
    async with ScriptedModelServer([Reply("first answer", chunk_size=4), Reply("second answer")]) as server:
        setup = make_setup(tmp_path, codex_bin_169, VERSION, server, driver="app-server")
        driver = setup.driver(recorder)
        assert driver.kind == "app-server"
        try:
            await driver.start(None)
            (thread,) = recorder.of(ThreadStarted)  # delivered before start() returned
            assert not thread.resumed and driver.thread_id == thread.thread_id
            assert await driver.submit(thought("one", "thought-1")) == "started"
            await recorder.wait_for(TurnFinished)
            assert await driver.submit(thought("two", "thought-2")) == "started"
            finished = await recorder.wait_for(TurnFinished, count=2)
        finally:
            await driver.aclose()
        assert [f.status for f in finished] == ["completed", "completed"]
        assert [f.client_ids for f in finished] == [("thought-1",), ("thought-2",)]
        assert texts(recorder.of(AgentMessageCompleted)) == ["first answer", "second answer"]
        assert "".join(d.text for d in recorder.of(Delta))[: len("first answer")] == "first answer"
        assert [s.client_ids for s in recorder.of(TurnStarted)] == [("thought-1",), ("thought-2",)]
        assert server.requests.turn_prompts() == ["one", "two"]
        # the rollout records our journal ids (clientUserMessageId)
        (rollout,) = setup.rollouts()
        assert thread.thread_id in rollout.name
        content = rollout.read_text()
        assert '"thought-1"' in content and '"thought-2"' in content
        assert driver.pids == []


async def test_thought_mid_turn_is_queued(tmp_path: Path, codex_bin_169: Path, recorder: Recorder) -> None:
    async with ScriptedModelServer([(Stall(1.5), Reply("slow")), Reply("next")]) as server:
        setup = make_setup(tmp_path, codex_bin_169, VERSION, server, driver="app-server")
        driver = setup.driver(recorder)
        try:
            await driver.start(None)
            assert await driver.submit(thought("first", "a")) == "started"
            await recorder.wait_for(TurnStarted)
            assert await driver.submit(thought("second", "b")) == "queued"
            assert await driver.submit(thought("third", "c")) == "queued"
            assert driver.queued == ("b", "c")
            finished = await recorder.wait_for(TurnFinished, count=3)
        finally:
            await driver.aclose()
        assert [f.client_ids for f in finished] == [("a",), ("b",), ("c",)]
        assert all(f.ok for f in finished)
        assert server.requests.turn_prompts()[:3] == ["first", "second", "third"]


async def test_thought_mid_turn_steers(tmp_path: Path, codex_bin_169: Path, recorder: Recorder) -> None:
    async with ScriptedModelServer([(Stall(2.0), Reply("unsteered")), Reply("steered answer")]) as server:
        setup = make_setup(tmp_path, codex_bin_169, VERSION, server, driver="app-server")
        driver = setup.driver(recorder, mid_turn="steer")
        try:
            await driver.start(None)
            await driver.submit(thought("write a poem", "a"))
            await recorder.wait_for(TurnStarted)
            assert await driver.submit(thought("make it short", "b")) == "steered"
            (finished,) = await recorder.wait_for(TurnFinished)
        finally:
            await driver.aclose()
        assert finished.ok and finished.client_ids == ("a", "b")
        assert len(recorder.of(TurnStarted)) == 1
        # the steered text reached the model within the same turn
        assert any("make it short" in r.user_texts() for r in server.requests.responses_requests())
        assert '"b"' in setup.rollouts()[0].read_text()


async def test_cancel_interrupts_the_running_turn(tmp_path: Path, codex_bin_169: Path, recorder: Recorder) -> None:
    # Codex 0.169 keeps reading the interrupted turn's model stream and answers the next turn
    # from it (observed: no second request), so the stall is short
    async with ScriptedModelServer([(Stall(3), Reply("late")), Reply("after cancel")]) as server:
        setup = make_setup(tmp_path, codex_bin_169, VERSION, server, driver="app-server")
        driver = setup.driver(recorder)
        try:
            await driver.start(None)
            assert await driver.cancel() is False  # nothing running yet
            await driver.submit(thought("long job", "a"))
            await recorder.wait_for(TurnStarted)
            await driver.submit(thought("queued behind", "b"))
            assert await driver.cancel() is True
            finished = await recorder.wait_for(TurnFinished, count=2, timeout=30)
        finally:
            await driver.aclose()
        assert [(f.status, f.client_ids) for f in finished] == [("interrupted", ("a",)), ("completed", ("b",))]
        assert finished[0].error is None


@pytest.mark.parametrize("approve", [True, False], ids=["approved", "denied"])
async def test_approval_round_trip(tmp_path: Path, codex_bin_169: Path, recorder: Recorder, approve: bool) -> None:
    async with ScriptedModelServer([escalated("touch approved-file"), Reply("done")]) as server:
        setup = make_setup(tmp_path, codex_bin_169, VERSION, server, driver="app-server")
        assert "on-request" in setup.home.config_path.read_text()
        driver = setup.driver(recorder)
        try:
            await driver.start(None)
            await driver.submit(thought("make the file", "a"))
            (asked,) = await recorder.wait_for(ApprovalRequested)
            assert asked.action == "run a command: /bin/bash -lc 'touch approved-file'"
            assert asked.call_id
            await driver.answer_approval(asked.request_id, approve)
            (finished,) = await recorder.wait_for(TurnFinished)
            with pytest.raises(DriverError, match="no pending approval"):
                await driver.answer_approval(asked.request_id, approve)
        finally:
            await driver.aclose()
        assert finished.ok
        assert recorder.of(ApprovalResolved) == [ApprovalResolved(asked.request_id, approve, "chat")]
        assert (setup.workspace / "approved-file").exists() is approve
        # the model got the command's outcome as the function call output
        assert server.requests.function_call_outputs()


async def test_unanswered_approval_is_declined_after_the_timeout(
    tmp_path: Path, codex_bin_169: Path, recorder: Recorder
) -> None:
    async with ScriptedModelServer([escalated("touch never-file"), Reply("ok")]) as server:
        setup = make_setup(tmp_path, codex_bin_169, VERSION, server, driver="app-server")
        driver = setup.driver(recorder, approval_timeout=1.0)
        try:
            await driver.start(None)
            await driver.submit(thought("make the file", "a"))
            (finished,) = await recorder.wait_for(TurnFinished)
        finally:
            await driver.aclose()
        (resolved,) = recorder.of(ApprovalResolved)
        assert (resolved.approved, resolved.by) == (False, "timeout")
        assert finished.ok and not (setup.workspace / "never-file").exists()


async def test_approval_policy_approve_answers_without_asking(
    tmp_path: Path, codex_bin_169: Path, recorder: Recorder
) -> None:
    async with ScriptedModelServer([escalated("touch auto-file"), Reply("ok")]) as server:
        setup = make_setup(tmp_path, codex_bin_169, VERSION, server, driver="app-server")
        driver = setup.driver(recorder, approval_policy="approve")
        try:
            await driver.start(None)
            await driver.submit(thought("make the file", "a"))
            await recorder.wait_for(TurnFinished)
        finally:
            await driver.aclose()
        assert recorder.of(ApprovalRequested) == []
        assert [(r.approved, r.by) for r in recorder.of(ApprovalResolved)] == [(True, "policy")]
        assert (setup.workspace / "auto-file").exists()


async def test_model_401_is_a_classified_auth_error(tmp_path: Path, codex_bin_169: Path, recorder: Recorder) -> None:
    async with ScriptedModelServer([HttpError(401, "invalid api key", times=10)]) as server:
        setup = make_setup(tmp_path, codex_bin_169, VERSION, server, driver="app-server")
        driver = setup.driver(recorder)
        try:
            await driver.start(None)
            await driver.submit(thought("hello", "a"))
            (finished,) = await recorder.wait_for(TurnFinished)
        finally:
            await driver.aclose()
        assert finished.status == "failed"
        assert finished.error is not None and finished.error.code is ErrorCode.AUTH
        assert "401" in finished.error.message
        assert "codex login" in finished.error.hint


async def test_turn_timeout_is_a_classified_error(tmp_path: Path, codex_bin_169: Path, recorder: Recorder) -> None:
    async with ScriptedModelServer([(Stall(30), Reply("late"))]) as server:
        setup = make_setup(tmp_path, codex_bin_169, VERSION, server, driver="app-server")
        driver = setup.driver(recorder, turn_timeout=2.0)
        try:
            await driver.start(None)
            await driver.submit(thought("slow", "a"))
            (finished,) = await recorder.wait_for(TurnFinished, timeout=30)
        finally:
            await driver.aclose()
        assert finished.status == "failed"
        assert finished.error is not None and finished.error.code is ErrorCode.OUTER_TIMEOUT
        # Said at once, before the turn is ended (the rollout records its end first: jobs, docs/jobs.md).
        (expired,) = recorder.of(TurnExpired)
        assert expired.error == finished.error and recorder.events.index(expired) < recorder.events.index(finished)


def codex_tree(driver_pid: int) -> tuple[psutil.Process, list[psutil.Process]]:
    leader = psutil.Process(driver_pid)
    return leader, leader.children(recursive=True)


@pytest.mark.parametrize("victim", ["native", "wrapper"])
async def test_kill_9_mid_turn_then_resume(
    tmp_path: Path, codex_bin_169: Path, recorder: Recorder, victim: str
) -> None:
    async with ScriptedModelServer(
        [Reply("remember 42"), (Stall(30), Reply("never")), Reply("resumed fine")]
    ) as server:
        setup = make_setup(tmp_path, codex_bin_169, VERSION, server, driver="app-server")
        driver = setup.driver(recorder)
        try:
            await driver.start(None)
            thread_id = driver.thread_id
            await driver.submit(thought("first", "a"))
            await recorder.wait_for(TurnFinished)
            await driver.submit(thought("second", "b"))
            await recorder.wait_for(TurnStarted, count=2)
            await driver.submit(thought("third", "c"))  # queued, never delivered
            await server.requests.wait_for(2)  # the model is "thinking" about the second thought
            leader, children = codex_tree(driver.pids[0])
            tree = [leader, *children]
            target = leader if victim == "wrapper" else next(p for p in children if "codex" in p.name())
            os.kill(target.pid, signal.SIGKILL)
            (failed,) = await recorder.wait_for(DriverFailed, timeout=30)
            with pytest.raises(DriverError, match="driver failed"):
                await driver.submit(thought("fourth", "d"))
        finally:
            await driver.aclose()
        assert failed.error.code in (ErrorCode.PROCESS_EXITED, ErrorCode.KILL_TIMEOUT)
        assert "exited unexpectedly" in failed.error.message
        assert failed.undelivered == ("c",)
        assert failed.in_flight == ("b",)
        assert recorder.of(TurnFinished)[1:] == []  # the killed turn is reported by DriverFailed
        for process in tree:
            assert not process.is_running() or process.status() == psutil.STATUS_ZOMBIE

        again = Recorder()
        resumed = setup.driver(again)
        try:
            await resumed.start(thread_id)
            (thread,) = again.of(ThreadStarted)
            assert thread.resumed and thread.thread_id == thread_id
            await resumed.submit(thought("third", "c"))
            (finished,) = await again.wait_for(TurnFinished)
        finally:
            await resumed.aclose()
        assert finished.ok
        assert texts(again.of(AgentMessageCompleted)) == ["resumed fine"]
        # the model saw the earlier conversation: the thread really was resumed
        last = server.requests.responses_requests()[-1]
        assert "first" in last.user_texts() and "third" in last.user_texts()


async def test_resuming_a_thread_that_never_ran_starts_a_new_one(
    tmp_path: Path, codex_bin_169: Path, recorder: Recorder
) -> None:
    async with ScriptedModelServer([Reply("hi")]) as server:
        setup = make_setup(tmp_path, codex_bin_169, VERSION, server, driver="app-server")
        driver = setup.driver(recorder)
        try:
            await driver.start("01a20262-0000-7000-8000-000000000000")
        finally:
            await driver.aclose()
        (thread,) = recorder.of(ThreadStarted)
        assert not thread.resumed and thread.note and "could not resume" in thread.note


async def test_start_failure_is_reported(tmp_path: Path, recorder: Recorder) -> None:
    async with ScriptedModelServer([]) as server:
        setup = make_setup(tmp_path, tmp_path / "missing-codex", VERSION, server, driver="app-server")
        driver = setup.driver(recorder)
        with pytest.raises(DriverError, match="cannot start"):
            await driver.start(None)
        await driver.aclose()


def test_rollout_client_id_shape(tmp_path: Path) -> None:
    """The parsing assumption the agent relies on, spelled out (docs/rollout.md)."""
    line = {
        "type": "event_msg",
        "payload": {"type": "item_completed", "item": {"type": "UserMessage", "client_id": "x"}},
    }
    assert json.loads(json.dumps(line))["payload"]["item"]["client_id"] == "x"


async def test_a_config_codex_rejects_fails_start_with_its_words(
    tmp_path: Path, codex_bin_169: Path, recorder: Recorder
) -> None:
    async with ScriptedModelServer([]) as server:
        setup = make_setup(
            tmp_path, codex_bin_169, VERSION, server, driver="app-server", extra={"approval_policy": "untrusted"}
        )
        driver = setup.driver(recorder)
        with pytest.raises(DriverError, match="no longer supported"):
            await driver.start(None)
        await driver.aclose()
        (failed,) = recorder.of(DriverFailed)
        assert failed.error.code is ErrorCode.PROCESS_EXITED
        assert "approval_policy" in failed.error.message
        assert driver.pids == []


async def test_mcp_tool_approval_round_trip(tmp_path: Path, codex_bin_169: Path, recorder: Recorder) -> None:
    """Without ``default_tools_approval_mode``, 0.169 asks (an MCP elicitation) before a tool call."""
    entry = mcp_server_entry()
    entry.pop("default_tools_approval_mode")
    async with ScriptedModelServer([CallTool("echo.echo", {"text": "hi"}), Reply("done")]) as server:
        setup = make_setup(
            tmp_path, codex_bin_169, VERSION, server, driver="app-server", extra={"mcp_servers": {"echo": entry}}
        )
        driver = setup.driver(recorder)
        try:
            await driver.start(None)
            await driver.submit(thought("use the tool", "a"))
            (asked,) = await recorder.wait_for(ApprovalRequested)
            assert asked.action.startswith("use a tool: ") and "echo" in asked.action
            await driver.answer_approval(asked.request_id, True)
            (finished,) = await recorder.wait_for(TurnFinished)
        finally:
            await driver.aclose()
        assert finished.ok
        (output,) = server.requests.function_call_outputs()
        assert "echo: hi" in output.output


async def test_approved_for_the_session_the_same_command_runs_again_without_asking(
    tmp_path: Path, codex_bin_169: Path, recorder: Recorder
) -> None:
    script = [escalated("touch session-file"), Reply("done"), escalated("touch session-file"), Reply("again")]
    async with ScriptedModelServer(script) as server:
        setup = make_setup(tmp_path, codex_bin_169, VERSION, server, driver="app-server")
        driver = setup.driver(recorder)
        try:
            await driver.start(None)
            await driver.submit(thought("make the file", "a"))
            (asked,) = await recorder.wait_for(ApprovalRequested)
            await driver.answer_approval(asked.request_id, True, for_session=True)
            await recorder.wait_for(TurnFinished)
            (setup.workspace / "session-file").unlink()
            await driver.submit(thought("make it again", "b"))
            finished = await recorder.wait_for(TurnFinished, count=2, timeout=60)
        finally:
            await driver.aclose()
        assert [f.ok for f in finished] == [True, True]
        assert len(recorder.of(ApprovalRequested)) == 1  # the second time Codex did not ask
        assert (setup.workspace / "session-file").exists()


async def test_silent_model_is_a_stream_idle_error(tmp_path: Path, codex_bin_169: Path, recorder: Recorder) -> None:
    async with ScriptedModelServer([(Stall(30), Reply("late"))]) as server:
        setup = make_setup(tmp_path, codex_bin_169, VERSION, server, driver="app-server")
        driver = setup.driver(recorder, stream_idle_timeout=2.0)
        try:
            await driver.start(None)
            await driver.submit(thought("slow", "a"))
            (finished,) = await recorder.wait_for(TurnFinished, timeout=30)
            assert not driver.busy
        finally:
            await driver.aclose()
        assert finished.status == "failed"
        assert finished.error is not None and finished.error.code is ErrorCode.STREAM_IDLE
