"""Driver latency: how long a thought takes to be accepted by Codex and answered.

Run: ``.venv/bin/python benchmarks/bench_drivers.py [--turns 10]``

The real Codex CLIs against the scripted model server (echo, immediate answers), one
conversation, one thought at a time (each after the previous turn finished), through
:mod:`coven_codex.codex.drivers` with a CODEX_HOME from :func:`prepare_codex_home`:

- *accepted*: ``await driver.submit()`` returning (app-server: ``turn/start`` answered; exec: the
  process spawned and the thought written to its stdin);
- *answered*: from calling ``submit()`` to the driver's ``AgentMessageCompleted`` for the reply
  (app-server: its ``item/completed`` notification; exec: the ``item.completed`` JSON line);
- *turn done*: to ``TurnFinished`` (exec: includes the process exit and tree cleanup).

Baseline: the exec driver on the same CLI (0.169.0), i.e. a ``codex exec ... resume`` process per
thought, which is what the bridge must do on old CLIs. Ratios are baseline / measured.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from coven_codex.codex.capabilities import detect_capabilities, plan_driver
from coven_codex.codex.drivers import (
    AgentMessageCompleted,
    DriverChoice,
    DriverEvent,
    DriverSettings,
    TurnFinished,
    create_driver,
)
from coven_codex.codex.home import prepare_codex_home
from coven_codex.codex.thought import Thought
from coven_codex.codex.version import detect_version
from coven_codex.journal import START
from coven_codex.testing.codex_config import DEFAULT_ENV_KEY, codex_config
from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.responders import echo_responder

ROOT = Path(__file__).resolve().parent.parent


def codex(version: str) -> Path:
    return ROOT / ".codex-cli" / version / "node_modules" / ".bin" / "codex"


@dataclass
class Timings:
    accepted: list[float] = field(default_factory=list)
    answered: list[float] = field(default_factory=list)
    done: list[float] = field(default_factory=list)


async def measure(version: str, choice: DriverChoice, turns: int, scratch: Path) -> Timings:
    workspace = scratch / f"ws-{version}-{choice}"
    workspace.mkdir()
    timings = Timings()
    answered = asyncio.Event()
    finished = asyncio.Event()
    stamps: dict[str, float] = {}

    async def sink(event: DriverEvent) -> None:
        if isinstance(event, AgentMessageCompleted):
            stamps["answered"] = time.perf_counter()
            answered.set()
        elif isinstance(event, TurnFinished):
            stamps["done"] = time.perf_counter()
            finished.set()

    async with ScriptedModelServer(responder=echo_responder) as server:
        config = codex_config(server.base_url)
        config.pop("approval_policy")
        env = {"HOME": str(scratch / "home"), "PATH": os.environ.get("PATH", ""), DEFAULT_ENV_KEY: "k"}
        home = prepare_codex_home(
            workspace / ".codex",
            workspace,
            driver="app-server" if choice == "app-server" else "exec",
            inline_config=config,
            environ=env,
        )
        executable = codex(version)
        detected = detect_version(executable, env=env)
        capabilities = detect_capabilities(executable, (str(executable),), detected, env=env, cache_dir=None)
        driver = create_driver(
            executable,
            detected,
            workspace,
            env=home.env,
            settings=DriverSettings(),
            sink=sink,
            plan=plan_driver(capabilities, choice),
        )
        await driver.start(None)
        try:
            for index in range(turns + 1):  # the first turn warms up (thread creation)
                answered.clear()
                finished.clear()
                start = time.perf_counter()
                await driver.submit(Thought(f"t{index}", f"thought {index}", START))
                accepted = time.perf_counter()
                await asyncio.wait_for(answered.wait(), 60)
                await asyncio.wait_for(finished.wait(), 60)
                if index:
                    timings.accepted.append(accepted - start)
                    timings.answered.append(stamps["answered"] - start)
                    timings.done.append(stamps["done"] - start)
                await asyncio.sleep(0.05)
        finally:
            await driver.aclose()
    return timings


def fmt(values: list[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    p90 = ms[min(len(ms) - 1, round(0.9 * (len(ms) - 1)))]
    return f"{statistics.median(ms):8.1f} {p90:8.1f}"


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10)
    args = parser.parse_args()
    runs: list[tuple[str, str, DriverChoice]] = [
        ("exec on 0.169.0 (baseline)", "0.169.0", "exec"),
        ("app-server on 0.169.0", "0.169.0", "app-server"),
        ("exec on 0.47.0", "0.47.0", "exec"),
    ]
    results: dict[str, Timings] = {}
    with tempfile.TemporaryDirectory(prefix="bench-drivers-") as tmp:
        for label, version, choice in runs:
            results[label] = await measure(version, choice, args.turns, Path(tmp))
    base = results[runs[0][0]]
    print(f"{args.turns} turns per driver, one at a time; milliseconds (p50 p90); ratio = baseline p50 / p50")
    print(
        f"{'driver':30} {'accepted p50 p90':>18} {'answered p50 p90':>18} {'turn done p50 p90':>18} "
        f"{'answered ratio':>15}"
    )
    for label, timing in results.items():
        ratio = statistics.median(base.answered) / statistics.median(timing.answered)
        print(f"{label:30} {fmt(timing.accepted):>18} {fmt(timing.answered):>18} {fmt(timing.done):>18} {ratio:14.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
