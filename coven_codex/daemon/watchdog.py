"""The shutdown watchdog: a shutdown's bound made hard from outside the event loop (docs/operations.md).

Every step of a shutdown has its own timeout, so the whole ends within ``kill_grace`` +
:data:`~coven_codex.conversation.manager.SHUTDOWN_SLACK`; only a blocked event loop or a bug can
overrun it. Should it be overrun by :data:`SHUTDOWN_WATCHDOG_MARGIN` more, a thread of the
watchdog logs one line saying so, writes every thread's stack to the log (stderr) and to
``<state_dir>/`` :data:`WATCHDOG_RECORD`, and the process exits with status 1; the next start
recovers as after ``kill -9`` and says, once, that the previous shutdown overran (the record is
renamed to :data:`WATCHDOG_RECORD_SEEN`). Should even that thread not run (the interpreter
itself stuck), ``faulthandler``'s own timer, :data:`BACKSTOP` seconds later, dumps the stacks
and exits.

The record is also what the test suite looks for: a test after which a state directory holds one
fails (``tests/conftest.py``), so a watchdog that fires is a bug found, never a hang hidden.
"""

from __future__ import annotations

import contextlib
import enum
import faulthandler
import logging
import os
import sys
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)

SHUTDOWN_WATCHDOG_MARGIN = 5.0
"""Seconds past the shutdown's own bound after which the daemon dumps its stacks and exits 1."""
BACKSTOP = 5.0
"""Seconds after that at which ``faulthandler`` ends the process should the watchdog's thread not run."""
WATCHDOG_RECORD_PREFIX = "shutdown-watchdog"
"""What the names of the watchdog's records begin with."""
WATCHDOG_RECORD = f"{WATCHDOG_RECORD_PREFIX}.txt"
"""The file in the state directory that holds the stacks of a shutdown the watchdog ended."""
WATCHDOG_RECORD_SEEN = f"{WATCHDOG_RECORD_PREFIX}.reported.txt"
"""The record once a start has reported it."""
FIRED_EXIT = 1
"""The exit status of a process the watchdog ended."""


class WatchdogPhase(enum.Enum):
    """Where the watchdog is."""

    IDLE = "idle"
    ARMED = "armed"
    DISARMED = "disarmed"
    FIRED = "fired"


class ShutdownWatchdog:
    """Ends the process if a shutdown runs past ``bound`` + :data:`SHUTDOWN_WATCHDOG_MARGIN` (module docstring)."""

    def __init__(self, state_dir: Path, bound: float) -> None:
        self.phase = WatchdogPhase.IDLE
        self._record = state_dir / WATCHDOG_RECORD
        self._limit = bound + SHUTDOWN_WATCHDOG_MARGIN
        self._disarmed = threading.Event()
        self._thread: threading.Thread | None = None

    def arm(self) -> None:
        """Start watching (the shutdown begins now)."""
        if self.phase is not WatchdogPhase.IDLE:
            return
        self.phase = WatchdogPhase.ARMED
        self._thread = threading.Thread(target=self._watch, name="shutdown-watchdog", daemon=True)
        self._thread.start()
        with contextlib.suppress(ValueError, OSError, AttributeError):  # stderr without a file descriptor
            faulthandler.dump_traceback_later(self._limit + BACKSTOP, exit=True, file=sys.stderr)

    def disarm(self) -> None:
        """The shutdown is over in time."""
        if self.phase is not WatchdogPhase.ARMED:
            return
        self.phase = WatchdogPhase.DISARMED
        self._disarmed.set()
        faulthandler.cancel_dump_traceback_later()

    def _watch(self) -> None:
        if self._disarmed.wait(self._limit):
            return
        self.phase = WatchdogPhase.FIRED
        said = (
            f"shutdown watchdog: the shutdown still runs {self._limit:g}s after it began, past its bound; "
            f"this is a bug (a blocked event loop or an unbounded wait). Every thread's stack follows and is "
            f"kept in {self._record}; exiting with status {FIRED_EXIT} (the next start recovers as after kill -9)"
        )
        with contextlib.suppress(Exception):
            log.critical("%s", said)
        with contextlib.suppress(OSError, ValueError), self._record.open("w", encoding="utf-8") as record:
            record.write(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} pid {os.getpid()}: {said}\n")
            record.flush()
            faulthandler.dump_traceback(file=record, all_threads=True)
        with contextlib.suppress(ValueError, OSError, AttributeError):
            faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        os._exit(FIRED_EXIT)


def report_previous_overrun(state_dir: Path) -> None:
    """At start: say once that the previous shutdown was ended by the watchdog, where its stacks are."""
    record = state_dir / WATCHDOG_RECORD
    if not record.exists():
        return
    seen = state_dir / WATCHDOG_RECORD_SEEN
    with contextlib.suppress(OSError):
        record.replace(seen)
        log.warning(
            "the previous shutdown overran its bound and was ended by the shutdown watchdog; every thread's "
            "stack at that moment is in %s: please report it with that file",
            seen,
        )
