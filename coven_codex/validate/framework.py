"""The preflight's machinery: probes, a deterministic plan, bounded execution.

A probe is an async function that inspects one thing and returns a :class:`ProbeResult`.
Probes run one after another in plan order, each inside its own time bound, so the plan
always finishes; a probe that overruns is reported as failed with the bound it broke.
Probes share facts (for example the Codex path found by an earlier probe) through
:class:`ProbeContext`. A probe whose prerequisite failed is skipped, not run.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from coven_codex.settings import Settings

log = logging.getLogger(__name__)


class Status(StrEnum):
    """A probe's verdict."""

    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """What a probe found: its status, a detail line and, for a warning or failure, the fix."""

    status: Status
    detail: str
    fix: str = ""

    @classmethod
    def ok(cls, detail: str) -> ProbeResult:
        """A pass with ``detail``."""
        return cls(Status.PASS, detail)

    @classmethod
    def warn(cls, detail: str, fix: str) -> ProbeResult:
        """A warning: ``detail`` and what to do about it."""
        return cls(Status.WARN, detail, fix)

    @classmethod
    def fail(cls, detail: str, fix: str) -> ProbeResult:
        """A failure: ``detail`` and what to do about it."""
        return cls(Status.FAIL, detail, fix)


@dataclass
class ProbeContext:
    """What probes know: the settings, the raw settings input, and facts found so far."""

    settings: Settings
    raw_settings: dict[str, Any] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)


ProbeFunction = Callable[[ProbeContext], Awaitable[ProbeResult]]


@dataclass(frozen=True, slots=True)
class Probe:
    """One check of the plan: code, title, function, time bound; ``needs``: probes that must pass first."""

    code: str
    title: str
    run: ProbeFunction
    timeout: float
    required: bool = True
    needs: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Outcome:
    """A probe's result and how long it took."""

    probe: Probe
    result: ProbeResult
    seconds: float

    @property
    def blocking(self) -> bool:
        """A required probe failed: the daemon would not run."""
        return self.probe.required and self.result.status is Status.FAIL

    def as_dict(self) -> dict[str, Any]:
        """The outcome as JSON-ready data (what ``validate --json`` prints for each check)."""
        return {
            "code": self.probe.code,
            "title": self.probe.title,
            "required": self.probe.required,
            "status": self.result.status.value,
            "detail": self.result.detail,
            "fix": self.result.fix,
            "seconds": round(self.seconds, 3),
        }


async def run_plan(plan: Sequence[Probe], context: ProbeContext) -> list[Outcome]:
    """Run every probe in order, each bounded by its timeout; never raises for a probe's fault."""
    outcomes: list[Outcome] = []
    passed: set[str] = set()
    for probe in plan:
        missing = [need for need in probe.needs if need not in passed]
        started = time.monotonic()
        if missing:
            result = ProbeResult(Status.SKIP, f"skipped: needs {', '.join(missing)} to pass first")
        else:
            result = await _run_bounded(probe, context)
        outcomes.append(Outcome(probe, result, time.monotonic() - started))
        if result.status in (Status.PASS, Status.WARN):
            passed.add(probe.code)
    return outcomes


async def _run_bounded(probe: Probe, context: ProbeContext) -> ProbeResult:
    try:
        async with asyncio.timeout(probe.timeout):
            return await probe.run(context)
    except TimeoutError:
        return ProbeResult.fail(
            f"did not finish within {probe.timeout:g} s",
            "Something hangs; run the step by hand to see where (see docs/operations.md).",
        )
    except Exception as exc:  # a probe's own bug must not hide the other probes' results
        log.exception("probe %s crashed", probe.code)
        return ProbeResult.fail(
            f"the probe itself failed: {type(exc).__name__}: {exc}", "Please report this with the daemon log."
        )


def exit_code(outcomes: Sequence[Outcome]) -> int:
    """0 when nothing required failed, 1 otherwise."""
    return 1 if any(outcome.blocking for outcome in outcomes) else 0
