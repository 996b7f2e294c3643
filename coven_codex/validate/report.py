"""Rendering the preflight's outcomes: a readable table, or JSON."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Sequence

from coven_codex.validate.framework import Outcome, Status, exit_code

_MARKS = {Status.PASS: "ok", Status.WARN: "WARN", Status.FAIL: "FAIL", Status.SKIP: "skip"}


def render_table(outcomes: Sequence[Outcome], width: int = 100) -> str:
    """The outcomes as a table for a terminal (fixes under failures and warnings), then READY or NOT READY."""
    code_width = max((len(o.probe.code) for o in outcomes), default=4)
    lines = [f"{'':4}  {'check':<{code_width}}  result", f"{'':4}  {'-' * code_width}  {'-' * 40}"]
    for outcome in outcomes:
        mark = _MARKS[outcome.result.status]
        if outcome.result.status is Status.FAIL and not outcome.probe.required:
            mark = "warn"
        prefix = f"{mark:<4}  {outcome.probe.code:<{code_width}}  "
        body = textwrap.wrap(outcome.result.detail, max(30, width - len(prefix))) or [""]
        lines.append(prefix + body[0])
        lines.extend(" " * len(prefix) + rest for rest in body[1:])
        if outcome.result.fix and outcome.result.status in (Status.FAIL, Status.WARN):
            fix = textwrap.wrap("fix: " + outcome.result.fix, max(30, width - len(prefix)))
            lines.extend(" " * len(prefix) + part for part in fix)
    failed = [o.probe.code for o in outcomes if o.blocking]
    warned = [
        o.probe.code
        for o in outcomes
        if o.result.status is Status.WARN or (o.result.status is Status.FAIL and not o.probe.required)
    ]
    lines.append("")
    if failed:
        lines.append(f"NOT READY: {len(failed)} required check(s) failed: {', '.join(failed)}")
    else:
        note = f" ({len(warned)} warning(s): {', '.join(warned)})" if warned else ""
        lines.append(f"READY: every required check passed{note}")
    return "\n".join(lines)


def render_json(outcomes: Sequence[Outcome]) -> str:
    """The outcomes as JSON: ``ok`` (no required check failed) and every check."""
    return json.dumps(
        {"ok": exit_code(outcomes) == 0, "checks": [o.as_dict() for o in outcomes]},
        indent=2,
        ensure_ascii=False,
    )
