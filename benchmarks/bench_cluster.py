"""Several daemons on one Redis journal (docs/distributed.md), with the real Codex 0.169.0.

1. **thought → reply**: ``--conversations`` conversations, ``--rounds`` thoughts each (each sent
   when the previous reply came), served by 1 daemon and by 3 daemons (each with its own
   workspace, state directory and CODEX_HOME; only Redis shared): p50/p99 of append → the
   ``response`` entry, and the wall time of the whole load.
2. **failover**: 3 daemons; the daemon holding the most conversations is killed with SIGKILL and
   a thought is sent at once to each of its conversations: the time from the kill until each is
   answered (target: at most the lease time + 2 s).

    .venv/bin/python benchmarks/bench_cluster.py [--conversations 30] [--rounds 3] [--lease 10]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import tomlkit
from _common import machine_line, percentile, print_table
from redis.asyncio import Redis

from coven_codex.cluster.keys import ClusterKeys
from coven_codex.entries import ThoughtEntry
from coven_codex.journal import JournalRecord, Position
from coven_codex.journal.redis import RedisJournal
from coven_codex.testing.codex_config import DEFAULT_ENV_KEY, codex_config
from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.redis_server import RedisServer
from coven_codex.testing.responders import echo_responder

ROOT = Path(__file__).resolve().parent.parent
CODEX = ROOT / ".codex-cli" / "0.169.0" / "node_modules" / ".bin" / "codex"


class Cluster:
    """N daemons as subprocesses on one Redis journal, each with its own folders."""

    def __init__(self, tmp: Path, server: ScriptedModelServer, redis: RedisServer, key: str, lease: float) -> None:
        self.tmp = tmp
        self.name = redis.url(key=key)
        self.keys = ClusterKeys(key)
        self.lease = lease
        self.base = tmp / f"{key}.toml"
        self.base.write_text(tomlkit.dumps(codex_config(server.base_url)))
        self.processes: list[asyncio.subprocess.Process] = []
        self.roots: list[Path] = []

    async def start(self, count: int) -> None:
        env = {k: v for k, v in os.environ.items() if k not in {"CODEX_HOME", "OPENAI_API_KEY"}}
        env[DEFAULT_ENV_KEY] = "bench"
        for index in range(count):
            root = self.tmp / f"{self.keys.namespace}-{index}"
            (root / "ws").mkdir(parents=True)
            self.roots.append(root)
            log = (root / "daemon.log").open("wb")
            argv = [
                sys.executable, "-m", "coven_codex", "run", "--workspace", str(root / "ws"),
                "--journal", self.name, "--state-dir", str(root / "state"),
                "--codex-home", str(root / "home"), "--codex-config", str(self.base),
                "--codex-path", str(CODEX), "--cluster", "--lease-time", str(self.lease), "--max-sessions", "64",
            ]  # fmt: skip
            self.processes.append(
                await asyncio.create_subprocess_exec(
                    *argv, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log, env=env, cwd=str(root)
                )
            )
            log.close()
        deadline = time.monotonic() + 60
        for root in self.roots:
            while b"ready (pid" not in (root / "daemon.log").read_bytes():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"a daemon did not start: {(root / 'daemon.log').read_text()[-2000:]}")
                await asyncio.sleep(0.05)

    def daemon_ids(self) -> list[str]:
        return [(root / "state" / "cluster-id").read_text().strip() for root in self.roots]

    async def stop(self) -> None:
        for process in self.processes:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                await asyncio.wait_for(process.wait(), 40)
            except TimeoutError:
                process.kill()
                await process.wait()


async def answered(
    journal: RedisJournal, texts: set[str], since: float, limit: float, start: Position
) -> dict[str, float]:
    """When (seconds after ``since``) each ``echo: text`` response appeared, following the journal from ``start``."""
    found: dict[str, float] = {}
    wanted = {f"echo: {t}": t for t in texts}

    async def follow() -> None:
        async for item in journal.tail(start):
            if isinstance(item, JournalRecord) and item.entry.kind == "response" and item.entry.text in wanted:
                found.setdefault(wanted[item.entry.text], time.perf_counter() - since)
                if len(found) == len(wanted):
                    return

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(follow(), limit)
    return found


async def load(cluster: Cluster, conversations: int, rounds: int) -> tuple[list[float], float]:
    journal = RedisJournal.from_url(cluster.name)
    latencies: list[float] = []
    started = time.perf_counter()

    async def talk(conversation: str) -> None:
        for index in range(rounds):
            text = f"{conversation} {index}"
            start = await journal.end_position()
            sent = time.perf_counter()
            waiter = asyncio.create_task(answered(journal, {text}, sent, 120, start))
            await asyncio.sleep(0)
            await journal.append(ThoughtEntry(conversation=conversation, text=text))
            got = await waiter
            if text in got:
                latencies.append(got[text])

    await asyncio.gather(*(talk(f"c{i:03d}") for i in range(conversations)))
    wall = time.perf_counter() - started
    await journal.aclose()
    return latencies, wall


async def failover(cluster: Cluster, conversations: int) -> tuple[list[float], int]:
    journal = RedisJournal.from_url(cluster.name)
    names = [f"f{i:03d}" for i in range(conversations)]
    start = await journal.end_position()
    warm = time.perf_counter()
    waiter = asyncio.create_task(answered(journal, {f"{n} warm" for n in names}, warm, 120, start))
    await asyncio.sleep(0)
    for name in names:
        await journal.append(ThoughtEntry(conversation=name, text=f"{name} warm"))
    await waiter
    client = Redis.from_url(cluster.name.split("?")[0])
    holders = {n: (await client.get(cluster.keys.holder(n)) or b"").decode() for n in names}
    await client.aclose()
    ids = cluster.daemon_ids()
    counts = {daemon: sum(1 for h in holders.values() if h == daemon) for daemon in ids}
    victim = max(counts, key=lambda d: counts[d])
    theirs = [n for n, h in holders.items() if h == victim]
    process = cluster.processes[ids.index(victim)]
    start = await journal.end_position()
    killed = time.perf_counter()
    process.kill()
    await process.wait()
    waiter = asyncio.create_task(answered(journal, {f"{n} after" for n in theirs}, killed, 120, start))
    await asyncio.sleep(0)
    for name in theirs:
        await journal.append(ThoughtEntry(conversation=name, text=f"{name} after"))
    got = await waiter
    await journal.aclose()
    return sorted(got.values()), len(theirs)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lease", type=float, default=10.0)
    args = parser.parse_args()
    print(machine_line())
    rows: list[list[object]] = []
    with tempfile.TemporaryDirectory() as tmp_name, RedisServer(Path(tmp_name) / "redis") as redis:
        tmp = Path(tmp_name)
        async with ScriptedModelServer(responder=echo_responder) as server:
            for count in (1, 3):
                cluster = Cluster(tmp, server, redis, f"load{count}", args.lease)
                try:
                    await cluster.start(count)
                    latencies, wall = await load(cluster, args.conversations, args.rounds)
                finally:
                    await cluster.stop()
                rows.append(
                    [
                        count,
                        f"{len(latencies)}/{args.conversations * args.rounds}",
                        f"{percentile(latencies, 0.5) * 1000:.0f} ms",
                        f"{percentile(latencies, 0.99) * 1000:.0f} ms",
                        f"{wall:.1f} s",
                    ]
                )
            print_table(
                f"thought → reply, {args.conversations} conversations x {args.rounds} thoughts (Codex 0.169.0)",
                ["daemons", "answered", "p50", "p99", "wall time"],
                rows,
            )
            cluster = Cluster(tmp, server, redis, "failover", args.lease)
            try:
                await cluster.start(3)
                times, moved = await failover(cluster, 12)
            finally:
                await cluster.stop()
            print_table(
                f"kill -9 of the daemon holding the most conversations → answered again (lease {args.lease:g} s)",
                ["conversations moved", "answered", "first", "median", "last", "target (lease + 2 s)"],
                [
                    [
                        moved,
                        len(times),
                        f"{times[0]:.1f} s" if times else "-",
                        f"{percentile(times, 0.5):.1f} s" if times else "-",
                        f"{times[-1]:.1f} s" if times else "-",
                        f"{args.lease + 2:g} s",
                    ]
                ],
            )


if __name__ == "__main__":
    asyncio.run(main())
