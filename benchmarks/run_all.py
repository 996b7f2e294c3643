"""Run every benchmark in this folder, one after another, and print their tables and a summary.

    .venv/bin/python benchmarks/run_all.py            # full runs (several minutes)
    .venv/bin/python benchmarks/run_all.py --quick    # short smoke runs, noisier figures
    .venv/bin/python benchmarks/run_all.py tailer mcp # only some

Each benchmark measures its own baseline in the same run and prints ratios against it; the
figures recorded in docs/performance.md come from full runs on an otherwise idle machine.
Every benchmark runs with what ``scripts/setup.sh`` installs (the ``dev`` and ``redis`` extras);
``bench_deps.py`` also compares against ``aiofiles`` and ``jsonrpcserver``, which only the ``bench``
extra installs (``.venv/bin/python -m pip install -e '.[bench]'``): without them it leaves those
rows out, says so, and still succeeds.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
QUICK_ARGS: dict[str, list[str]] = {
    "tailer": ["--quick"],
    "journal": ["--quick"],
    "mcp": ["--quick"],
    "rollout": ["--megabytes", "20"],
    "drivers": ["--turns", "3"],
    "agent": ["--thoughts", "20", "--lines", "100"],
    "web": ["--quick"],
    "scale": ["--sizes", "1", "10", "50", "--baseline-max", "10", "--spread", "0"],
    "cluster": ["--conversations", "6", "--rounds", "2", "--lease", "3"],
    "redis_journal": ["--quick"],
    "restart": ["--sizes", "10", "--baseline-max", "10", "--backlog", "100000", "--backlog-baseline-max", "100000"],
    "deps": ["--quick"],
}


def main() -> int:
    names = sorted(path.stem.removeprefix("bench_") for path in HERE.glob("bench_*.py"))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("only", nargs="*", choices=[*names, []], metavar="NAME", help=f"any of {', '.join(names)}")
    parser.add_argument("--quick", action="store_true", help="short smoke runs")
    args = parser.parse_args()
    summary: list[tuple[str, float, int]] = []
    for name in args.only or names:
        command = [sys.executable, str(HERE / f"bench_{name}.py"), *(QUICK_ARGS.get(name, []) if args.quick else [])]
        print(f"\n=== {name}: {' '.join(command[1:])}", flush=True)
        started = time.monotonic()
        code = subprocess.run(command, cwd=HERE.parent, check=False).returncode
        summary.append((name, time.monotonic() - started, code))
    print("\n| benchmark | seconds | result |\n|---|---:|---|")
    for name, seconds, code in summary:
        print(f"| {name} | {seconds:.0f} | {'ok' if code == 0 else f'FAILED (exit {code})'} |")
    return 0 if all(code == 0 for _, _, code in summary) else 1


if __name__ == "__main__":
    sys.exit(main())
