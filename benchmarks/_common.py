"""Shared helpers for the benchmark scripts: percentiles, CPU accounting, table printing.

Generic on purpose: any benchmark may import it (``from _common import ...``; the
scripts run as ``.venv/bin/python benchmarks/bench_X.py``, which puts this directory
on ``sys.path``).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import io
import math
import os
import platform
import re
import resource
import subprocess
import sys
import tarfile
import time
import tomllib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def percentile(values: Sequence[float], fraction: float) -> float:
    """The ``fraction`` (0..1) percentile by linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = fraction * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True, slots=True)
class Summary:
    count: int
    p50: float
    p99: float
    max: float
    mean: float


def summarize(values: Sequence[float]) -> Summary:
    if not values:
        return Summary(0, math.nan, math.nan, math.nan, math.nan)
    return Summary(
        len(values), percentile(values, 0.5), percentile(values, 0.99), max(values), sum(values) / len(values)
    )


@dataclass(slots=True)
class CpuSample:
    """CPU seconds (user + system, all threads of this process) and context switches."""

    cpu: float = 0.0
    voluntary_switches: int = 0
    wall: float = 0.0


@dataclass(slots=True)
class CpuMeter:
    result: CpuSample = field(default_factory=CpuSample)


@contextmanager
def cpu_meter() -> Iterator[CpuMeter]:
    """Measures this process's CPU time and voluntary context switches inside the block."""
    meter = CpuMeter()
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    try:
        yield meter
    finally:
        after = resource.getrusage(resource.RUSAGE_SELF)
        meter.result = CpuSample(
            cpu=(after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
            voluntary_switches=after.ru_nvcsw - before.ru_nvcsw,
            wall=time.perf_counter() - start,
        )


def ms(seconds: float) -> str:
    """Seconds as milliseconds with a sensible precision."""
    if math.isnan(seconds):
        return "-"
    value = seconds * 1000
    return f"{value:.3f}" if value < 1 else f"{value:.2f}" if value < 100 else f"{value:.0f}"


def ratio(value: float, baseline: float) -> str:
    if math.isnan(value) or math.isnan(baseline) or value == 0:
        return "-"
    return f"{baseline / value:.1f}x"


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """A plain Markdown table (pastes straight into docs)."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    print(f"\n### {title}\n")
    print("| " + " | ".join(h.ljust(w) for h, w in zip(cells[0], widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in cells[1:]:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")


def machine_line() -> str:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{platform.system()} {platform.release()}, Python {platform.python_version()},"
        f" {os.cpu_count()} CPUs, load average {load}"
    )


def base_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="shorter runs (a smoke test, noisier figures)")
    return parser


@dataclass(frozen=True, slots=True)
class CodeTree:
    """A ``coven_codex`` to run a daemon with: ``source`` holds the package (the daemon's working
    directory), ``pythonpath`` is what goes first on ``PYTHONPATH`` for it."""

    source: Path
    pythonpath: str


CURRENT = CodeTree(ROOT, str(ROOT))
"""This checkout's code."""

_REQUIREMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def missing_requirements(pyproject: Path) -> list[str]:
    """The dependencies ``pyproject`` declares that are not installed in this environment."""
    declared = tomllib.loads(pyproject.read_text())["project"].get("dependencies", [])
    missing = []
    for requirement in declared:
        match = _REQUIREMENT_NAME.match(requirement)
        if match is None:
            continue
        try:
            importlib.metadata.version(match[0])
        except importlib.metadata.PackageNotFoundError:
            missing.append(requirement)
    return missing


def export_baseline(rev: str, into: Path) -> CodeTree:
    """The ``coven_codex`` of ``rev`` (``git archive``) in ``into``, with the dependencies it declares
    that this environment no longer has (an older revision may use a library the project dropped
    since, e.g. ``jsonrpcserver``) installed beside it by pip, at the versions of this environment
    where it has them: a baseline runs whole from a fresh clone. Exits with what to do when pip
    cannot install them."""
    data = subprocess.run(
        ["git", "archive", rev, "coven_codex", "pyproject.toml"], cwd=ROOT, check=True, capture_output=True
    ).stdout
    source = into / "src"
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        archive.extractall(source, filter="data")
    missing = missing_requirements(source / "pyproject.toml")
    if not missing:
        return CodeTree(source, str(source))
    deps = into / "deps"
    frozen = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--exclude-editable", "--disable-pip-version-check"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    constraints = into / "constraints.txt"
    constraints.write_text("".join(f"{line}\n" for line in frozen.splitlines() if "==" in line))
    print(f"  baseline {rev}: installing what it needs and this environment lacks: {', '.join(missing)}", flush=True)
    installed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--target",
            str(deps),
            "--constraint",
            str(constraints),
            *missing,
        ],
        check=False,
        capture_output=True,
        text=True,
    )
    if installed.returncode != 0:
        raise SystemExit(
            f"the baseline {rev} needs {', '.join(missing)}, which pip could not install"
            f" ({installed.stderr.strip()[-500:]}); install it into this environment, or measure without"
            " the baseline (--baseline-max 0)"
        )
    return CodeTree(source, os.pathsep.join([str(source), str(deps)]))
