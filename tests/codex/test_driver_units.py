"""Driver building blocks without Codex: deadlines, exit classification, factory, event delivery."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from coven_codex.codex.capabilities import AppServerProtocol, CodexCapabilities, plan_driver
from coven_codex.codex.drivers import (
    AppServerDriver,
    ExecDriver,
    TurnFinished,
    create_driver,
    queue_sink,
)
from coven_codex.codex.drivers.clock import TurnClock
from coven_codex.codex.drivers.events import DriverEvent, EventDispatcher
from coven_codex.codex.errors import ErrorCode, process_error
from coven_codex.codex.version import CodexVersion
from coven_codex.daemon.bootstrap import driver_settings
from coven_codex.settings import Settings

NEW, OLD = CodexVersion(0, 169, 0), CodexVersion(0, 47, 0)


async def test_clock_turn_timeout() -> None:
    clock = TurnClock(turn_timeout=0.2, idle_timeout=10)
    error = await asyncio.wait_for(clock.expired(), 2)
    assert error.code is ErrorCode.OUTER_TIMEOUT


async def test_clock_idle_timeout_and_activity() -> None:
    clock = TurnClock(turn_timeout=10, idle_timeout=0.3)
    waiter = asyncio.create_task(clock.expired())
    for _ in range(4):
        await asyncio.sleep(0.15)
        clock.touch()
        assert not waiter.done()
    error = await asyncio.wait_for(waiter, 2)
    assert error.code is ErrorCode.STREAM_IDLE


async def test_clock_idle_pauses_while_an_approval_is_pending() -> None:
    clock = TurnClock(turn_timeout=10, idle_timeout=0.2)
    clock.approval_started()
    waiter = asyncio.create_task(clock.expired())
    await asyncio.sleep(0.5)
    assert not waiter.done()
    clock.approval_ended()  # wakes the sleeper: the idle deadline applies again from now
    error = await asyncio.wait_for(waiter, 2)
    assert error.code is ErrorCode.STREAM_IDLE


def test_process_error_by_signal_ignores_log_noise() -> None:
    noise = ["WARNING: sandbox prerequisites missing", "ERROR codex: could not find bubblewrap (sandbox)"]
    error = process_error(-9, noise)
    assert error.code is ErrorCode.PROCESS_EXITED
    assert "killed by signal 9" in error.message


def test_process_error_classifies_error_lines_of_a_failed_exit() -> None:
    lines = ["WARNING: proceeding without sandbox", "Error: unexpected status 401 Unauthorized"]
    assert process_error(1, lines).code is ErrorCode.AUTH
    assert process_error(1, ["WARNING: 401 is only a warning here"]).code is ErrorCode.PROCESS_EXITED
    assert process_error(3, []).message == "Codex exited unexpectedly (exit 3)"


FULL = AppServerProtocol(
    client_requests=frozenset(
        {"thread/start", "thread/resume", "turn/start", "turn/interrupt", "turn/steer", "thread/unsubscribe"}
    ),
    server_requests=frozenset({"item/commandExecution/requestApproval"}),
    notifications=frozenset({"turn/started", "turn/completed"}),
    turn_start_fields=frozenset({"threadId", "input", "clientUserMessageId"}),
    turn_steer_fields=frozenset({"threadId", "input", "expectedTurnId", "clientUserMessageId"}),
)


async def test_create_driver_and_settings(tmp_path: Path) -> None:
    queue: asyncio.Queue[DriverEvent] = asyncio.Queue()
    settings = driver_settings(Settings(workspace=tmp_path, mid_turn="steer", approval_policy="deny"))
    assert (settings.mid_turn, settings.approval_policy, settings.turn_timeout) == ("steer", "deny", 600.0)
    app = plan_driver(CodexCapabilities(version="0.169.0", app_server=FULL))
    no_steer = plan_driver(
        CodexCapabilities(version="0.140.0", app_server=FULL.model_copy(update={"turn_steer_fields": frozenset()}))
    )
    exec_plan = plan_driver(CodexCapabilities(version="0.47.0", why_not="no schema"))
    new = create_driver(tmp_path / "codex", NEW, tmp_path, env={}, settings=settings, sink=queue_sink(queue), plan=app)
    plain = create_driver(
        tmp_path / "codex", NEW, tmp_path, env={}, settings=settings, sink=queue_sink(queue), plan=no_steer
    )
    old = create_driver(
        tmp_path / "codex", OLD, tmp_path, env={}, settings=settings, sink=queue_sink(queue), plan=exec_plan
    )
    assert isinstance(new, AppServerDriver) and app.records_client_id and new.supports_steer
    assert isinstance(plain, AppServerDriver) and not plain.supports_steer
    assert isinstance(old, ExecDriver) and not exec_plan.records_client_id and not old.supports_steer
    assert not new.busy and new.pids == [] and new.thread_id is None


async def test_dispatcher_delivers_in_order_and_survives_a_failing_sink() -> None:
    seen: list[DriverEvent] = []

    async def sink(event: DriverEvent) -> None:
        if isinstance(event, TurnFinished) and event.turn_id == "boom":
            raise RuntimeError("sink bug")
        seen.append(event)

    dispatcher = EventDispatcher(sink)
    runner = asyncio.create_task(dispatcher.run())
    events = [TurnFinished(str(i), "completed", ()) for i in range(3)]
    dispatcher.emit(events[0])
    dispatcher.emit(TurnFinished("boom", "completed", ()))
    dispatcher.emit(events[1])
    await dispatcher.deliver(events[2])  # returns once the sink handled it
    assert seen == events
    runner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await runner


CAPABILITIES = ("records_client_id", "records_turn_end", "takes_images", "image_urls", "forks_threads")


def test_what_a_driver_can_do_is_one_record_built_once_from_the_probe() -> None:
    """The plan is the one record: the driver maker and the drivers keep no copy of their own."""
    from coven_codex.codex.drivers.base import CodexDriver
    from coven_codex.daemon.bootstrap import DriverMaker

    app = plan_driver(CodexCapabilities(version="0.169.0", app_server=FULL))
    old = plan_driver(CodexCapabilities(version="0.47.0", why_not="no schema"))
    assert all(getattr(app, name) for name in CAPABILITIES)
    assert not any(getattr(old, name) for name in CAPABILITIES)
    copies = [
        f"{owner.__name__}.{name}"
        for owner in (DriverMaker, CodexDriver, AppServerDriver, ExecDriver)
        for name in CAPABILITIES
        if any(name in vars(cls) or name in getattr(cls, "__annotations__", {}) for cls in owner.__mro__)
    ]
    assert copies == []
