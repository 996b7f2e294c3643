"""Rollout parsing: parse + translate a >= 100 MB rollout assembled from the real fixtures.

    .venv/bin/python benchmarks/bench_rollout.py [--quick] [--megabytes N]

The file is the committed fixture rollouts of every Codex version (tests/fixtures/rollouts) but
the old format's,
whole files repeated in order until it reaches the size. Every row reads the file in 16 MB
chunks and splits it into lines with their offsets (as the tailer does), then:

- baseline ``json.loads``: decodes every line, nothing else (the cheapest full decode);
- ``parse_line``: every line into a typed record;
- translator, ``decode_all``: every line parsed, records translated into chat entries;
- translator (default): the product path; lines whose envelope carries nothing for the
  chat are recognised without decoding.

Target: the default translator parses + translates >= 100 MB in <= 2 s on this machine.
"""

from __future__ import annotations

import gc
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from _common import base_parser, machine_line, print_table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from coven_codex.entries import ErrorEntry  # noqa: E402
from coven_codex.rollout import RolloutParseError, RolloutTranslator, parse_line, peek_envelope  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "rollouts"
CHUNK = 16 * 2**20
TARGET_SECONDS = 2.0
TARGET_MEGABYTES = 100


def assemble(path: Path, megabytes: int) -> int:
    files = sorted(
        p
        for p in FIXTURES.glob("*/*.jsonl")
        if not p.name.endswith((".exec.jsonl", ".expected.jsonl"))
        and peek_envelope(p.read_bytes().split(b"\n", 1)[0]) is not None  # not the old format (0.20)
    )
    unit = b"".join(p.read_bytes() for p in files)
    repeats = -(-megabytes * 10**6 // len(unit))
    with path.open("wb") as handle:
        for _ in range(repeats):
            handle.write(unit)
    return len(unit) * repeats


def lines(path: Path) -> Iterator[tuple[bytes, int]]:
    """(line without newline, start offset), reading 16 MB at a time."""
    offset = 0
    rest = b""
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            data = rest + chunk
            start = 0
            find = data.find
            while (newline := find(b"\n", start)) != -1:
                yield data[start:newline], offset + start
                start = newline + 1
            offset += start
            rest = data[start:]


def run_baseline(path: Path) -> tuple[int, int]:
    count = 0
    loads = json.loads
    for data, _start in lines(path):
        loads(data)
        count += 1
    return count, 0


def run_parse(path: Path) -> tuple[int, int]:
    records = errors = 0
    for data, start in lines(path):
        if isinstance(parse_line(data, start), RolloutParseError):
            errors += 1
        else:
            records += 1
    return records, errors


def run_translator(decode_all: bool) -> Callable[[Path], tuple[int, int]]:
    def run(path: Path) -> tuple[int, int]:
        translator = RolloutTranslator("bench", "thread", decode_all=decode_all)
        entries = errors = 0
        feed = translator.feed_bytes
        for data, start in lines(path):
            for entry in feed(data, start):
                entries += 1
                if isinstance(entry, ErrorEntry) and entry.code == "BAD_LINE":
                    errors += 1
        return entries, errors

    return run


def best_of(repeats: int, run: Callable[[Path], tuple[int, int]], path: Path) -> tuple[float, float, int, int]:
    """Best CPU seconds and best wall seconds over ``repeats`` runs.

    CPU time (this process) is the headline figure: on a shared 2-core machine the wall
    time mostly measures the other jobs.
    """
    best_cpu = best_wall = float("inf")
    produced = bad = 0
    for _ in range(repeats):
        gc.collect()
        wall, cpu = time.perf_counter(), time.process_time()
        produced, bad = run(path)
        best_cpu = min(best_cpu, time.process_time() - cpu)
        best_wall = min(best_wall, time.perf_counter() - wall)
    return best_cpu, best_wall, produced, bad


def main() -> int:
    parser = base_parser(__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--megabytes", type=int, default=100, help="size of the assembled rollout (default 100)")
    args = parser.parse_args()
    repeats = 1 if args.quick else 3
    with tempfile.TemporaryDirectory(prefix="bench-rollout-") as tmp:
        path = Path(tmp) / "rollout.jsonl"
        size = assemble(path, args.megabytes)
        line_count = sum(1 for _ in lines(path))
        print(machine_line())
        print(f"rollout: {size / 1e6:.1f} MB, {line_count} lines, best of {repeats}")
        runs = [
            ("baseline: json.loads every line", run_baseline, "lines"),
            ("parse_line (typed records)", run_parse, "records"),
            ("translator, decode_all", run_translator(True), "entries"),
            ("translator (default, fast path)", run_translator(False), "entries"),
        ]
        results = [(name, *best_of(repeats, run, path), unit) for name, run, unit in runs]
    baseline = results[0][1]
    rows = []
    for name, cpu, wall, produced, bad, unit in results:
        rows.append(
            [
                name,
                f"{cpu:.2f}",
                f"{wall:.2f}",
                f"{size / 1e6 / cpu:.0f}",
                f"{cpu / baseline:.2f}",
                f"{produced} {unit}",
                bad,
            ]
        )
    print_table(
        "Rollout parse + translate",
        ["pipeline", "CPU s", "wall s", "MB/s (CPU)", "CPU vs baseline", "produced", "bad lines"],
        rows,
    )
    print("\n" + target_line(size, results[-1][1], results[-1][2]))
    return 0


def target_line(size: int, cpu: float, wall: float) -> str:
    """The verdict on the target, at the run's own scale.

    A full run (>= 100 MB) is judged on the target itself; a smaller (quick) run on the same
    throughput, ``TARGET_SECONDS`` scaled to its size, and says so: it is no miss of the target.
    """
    full = TARGET_MEGABYTES * 10**6
    if size >= full:
        verdict = "met" if cpu <= TARGET_SECONDS else "NOT met"
        return (
            f"target: >= {TARGET_MEGABYTES} MB parsed + translated in <= {TARGET_SECONDS:g} s: {verdict} "
            f"({cpu:.2f} s CPU, {wall:.2f} s wall)"
        )
    allowed = TARGET_SECONDS * size / full
    verdict = "met" if cpu <= allowed else "NOT met"
    return (
        f"target at this run's scale ({size / 1e6:.0f} MB, so <= {allowed:.2f} s; the full run checks "
        f"{TARGET_MEGABYTES} MB in {TARGET_SECONDS:g} s): {verdict} ({cpu:.2f} s CPU, {wall:.2f} s wall)"
    )


if __name__ == "__main__":
    raise SystemExit(main())
