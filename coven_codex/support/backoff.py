"""Backoff and quieting for everything the agent retries.

One delay function for every retry loop (Codex restarts, failed hand-overs, a crashing
session; webhook deliveries draw their wait below it, :func:`full_jitter`), and
:class:`RepeatFilter`, which lets a failure that keeps repeating reach the chat once, followed
by a summary now and then instead of one entry per retry.
"""

from __future__ import annotations

import random
import time

MAX_BACKOFF = 60.0
"""No retry waits longer than this (seconds)."""

SUMMARY_EVERY = 300.0
"""A repeating failure is summarised at most this often (seconds)."""


def backoff(base: float, failures: int, *, cap: float = MAX_BACKOFF) -> float:
    """The wait before the next try after ``failures`` consecutive failures (1 → ``base``), doubling up to
    ``cap`` (default :data:`MAX_BACKOFF`)."""
    if failures <= 0:
        return 0.0
    return min(base * 2.0 ** min(failures - 1, 32), cap)


def full_jitter(base: float, failures: int, *, cap: float = MAX_BACKOFF) -> float:
    """A random wait between 0 and :func:`backoff` ("full jitter"): many clients retrying one server
    spread out instead of arriving together."""
    return random.uniform(0.0, backoff(base, failures, cap=cap))


class RepeatFilter:
    """Decides which occurrences of a repeating failure are reported.

    :meth:`note` returns ``""`` for a failure unlike the previous one (report it), ``None`` for
    a repeat (stay quiet), and, once :data:`SUMMARY_EVERY` seconds have passed since the last
    report, a summary such as ``"(failed 12 more times in the last 5 minutes)"`` to report
    with it. :meth:`clear` after a success.
    """

    def __init__(self, every: float = SUMMARY_EVERY) -> None:
        self._every = every
        self._kind: str | None = None
        self._quiet = 0
        self._reported_at = 0.0

    def note(self, kind: str, now: float | None = None) -> str | None:
        """Record one occurrence of ``kind``; what to add to its report, or ``None`` to stay quiet."""
        now = time.monotonic() if now is None else now
        if kind != self._kind:
            self._kind, self._quiet, self._reported_at = kind, 0, now
            return ""
        if now - self._reported_at < self._every:
            self._quiet += 1
            return None
        minutes = max(1, round((now - self._reported_at) / 60))
        summary = f"(failed {self._quiet + 1} more times in the last {minutes} minute{'s' if minutes > 1 else ''})"
        self._quiet, self._reported_at = 0, now
        return summary

    def clear(self) -> None:
        """The failure stopped: the next one is reported at once."""
        self._kind, self._quiet = None, 0
