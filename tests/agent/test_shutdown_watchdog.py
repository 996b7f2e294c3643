"""The shutdown watchdog (issue 26, item 14): when a shutdown overruns its bound it says so in one
line, keeps every thread's stack in the state directory and exits 1; the next start reports it
once; ``tests/conftest.py`` fails any test after which a state directory holds such a record."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from coven_codex.daemon.watchdog import (
    WATCHDOG_RECORD,
    WATCHDOG_RECORD_SEEN,
    ShutdownWatchdog,
    WatchdogPhase,
    report_previous_overrun,
)

# A shutdown whose event loop is blocked (a synchronous wait in the main thread).
BLOCKED = """
import sys, time
from pathlib import Path
from coven_codex.daemon import watchdog

watchdog.SHUTDOWN_WATCHDOG_MARGIN = 0.0
def a_shutdown_step_that_never_returns() -> None:
    time.sleep(60)

guard = watchdog.ShutdownWatchdog(Path(sys.argv[1]), bound=0.5)
guard.arm()
a_shutdown_step_that_never_returns()
"""


def test_a_shutdown_past_its_bound_is_ended_with_its_stacks_kept_and_reported_at_the_next_start(
    tmp_path_factory: pytest.TempPathFactory, caplog: pytest.LogCaptureFixture
) -> None:
    # (not under tmp_path: the suite's own check would take this record for a daemon's)
    state = tmp_path_factory.mktemp("watchdog-state")
    done = subprocess.run(
        [sys.executable, "-c", BLOCKED, str(state)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1, done.stderr
    assert "shutdown watchdog: the shutdown still runs 0.5s after it began" in done.stderr
    assert "a_shutdown_step_that_never_returns" in done.stderr  # the stacks, in the log
    record = (state / WATCHDOG_RECORD).read_text()
    assert "a_shutdown_step_that_never_returns" in record and "exiting with status 1" in record
    with caplog.at_level(logging.WARNING, logger="coven_codex.daemon.watchdog"):
        report_previous_overrun(state)
        report_previous_overrun(state)  # once
    assert [r.getMessage().count("ended by the shutdown watchdog") for r in caplog.records] == [1]
    assert not (state / WATCHDOG_RECORD).exists() and (state / WATCHDOG_RECORD_SEEN).read_text() == record


def test_a_shutdown_within_its_bound_leaves_no_record(tmp_path: Path) -> None:
    guard = ShutdownWatchdog(tmp_path, bound=0.05)
    guard.arm()
    guard.disarm()
    assert guard.phase is WatchdogPhase.DISARMED
    assert not list(tmp_path.iterdir())
