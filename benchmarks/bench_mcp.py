"""Spells (MCP) benchmark: the coven shim + daemon against an official-SDK server over stdio.

    .venv/bin/python benchmarks/bench_mcp.py [--quick]

Measured in the same run, same raw JSON-RPC client for both:
  1. cold start: spawn the server command, ``initialize``, ``tools/list``; time to the list answer
     (coven: the shim as Codex launches it, with the daemon already running; baseline: a
     ``MCPServer`` script started as ``python server.py``);
  2. ``tools/call`` round trip of a no-op tool, one caller, p50 / p99;
  3. throughput: 8 callers, each its own session (8 shims on one daemon vs 8 SDK server
     processes), each calling the no-op tool back to back; plus 8 calls in flight on one session;
  4. cold start of ``coven-codex mcp-serve`` (the job tools, docs/jobs.md) to its ``tools/list``
     answer, against the same SDK server.
Prints a table with ratios (coven / SDK).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SDK_SERVER = '''
from mcp.server.mcpserver import MCPServer

server = MCPServer("bench")


@server.tool()
def noop() -> str:
    """Does nothing."""
    return "ok"


server.run()
'''

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}},
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def run_daemon() -> None:
    """``--daemon``: serve a no-op spell; print the shim's command line; stop when stdin closes."""
    from coven_codex.mcp import SpellRegistry, SpellServer, codex_mcp_entry

    registry = SpellRegistry()

    @registry.spell
    def noop() -> str:
        """Does nothing."""
        return "ok"

    async def serve() -> None:
        async with SpellServer(registry) as server:
            entry = codex_mcp_entry(server.socket_path, server.secret, "0.169.0")
            print(json.dumps(entry), flush=True)
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, sys.stdin.read)

    asyncio.run(serve())


class Session:
    """A raw JSON-RPC client on a server process's stdio."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.next_id = 1
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.reader = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, command: str, args: Sequence[str], env: dict[str, str]) -> Session:
        process = await asyncio.create_subprocess_exec(
            command,
            *args,
            env={**os.environ, **env},
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            limit=16 * 2**20,
        )
        return cls(process)

    async def _read(self) -> None:
        assert self.process.stdout is not None
        while line := await self.process.stdout.readline():
            message = json.loads(line)
            future = self.pending.pop(message.get("id"), None)
            if future is not None and not future.done():
                future.set_result(message)

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        request_id = self.next_id
        self.next_id += 1
        future = asyncio.get_running_loop().create_future()
        self.pending[request_id] = future
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self._write(message)
        return await future

    def _write(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")

    async def handshake(self) -> dict[str, Any]:
        future = asyncio.get_running_loop().create_future()
        self.pending[0] = future
        self._write(INITIALIZE)
        await future
        self._write(INITIALIZED)
        return await self.request("tools/list")

    async def call_noop(self) -> None:
        response = await self.request("tools/call", {"name": "noop", "arguments": {}})
        assert response["result"]["content"][0]["text"] == "ok", response

    async def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            async with asyncio.timeout(5):
                await self.process.wait()
        except TimeoutError:
            self.process.kill()
            await self.process.wait()
        self.reader.cancel()


async def cold_start(
    command: str, args: Sequence[str], env: dict[str, str], runs: int, first_tool: str = "noop"
) -> list[float]:
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        session = await Session.start(command, args, env)
        listed = await session.handshake()
        times.append(time.perf_counter() - began)
        assert listed["result"]["tools"][0]["name"] == first_tool
        await session.close()
    return times


async def round_trips(command: str, args: Sequence[str], env: dict[str, str], calls: int) -> list[float]:
    session = await Session.start(command, args, env)
    await session.handshake()
    for _ in range(50):
        await session.call_noop()
    times = []
    for _ in range(calls):
        began = time.perf_counter()
        await session.call_noop()
        times.append(time.perf_counter() - began)
    await session.close()
    return times


async def throughput(
    command: str, args: Sequence[str], env: dict[str, str], callers: int, calls: int, *, shared_session: bool
) -> float:
    sessions = [await Session.start(command, args, env) for _ in range(1 if shared_session else callers)]
    for session in sessions:
        await session.handshake()
        await session.call_noop()

    async def caller(session: Session) -> None:
        for _ in range(calls):
            await session.call_noop()

    began = time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for index in range(callers):
            group.create_task(caller(sessions[0 if shared_session else index]))
    elapsed = time.perf_counter() - began
    for session in sessions:
        await session.close()
    return callers * calls / elapsed


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def bench(quick: bool) -> None:
    daemon = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--daemon", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    assert daemon.stdout is not None and daemon.stdin is not None
    entry = json.loads(await daemon.stdout.readline())
    coven = (entry["command"], entry["args"], entry["env"])
    with tempfile.TemporaryDirectory() as scratch:
        script = Path(scratch) / "sdk_server.py"
        script.write_text(SDK_SERVER)
        sdk = (sys.executable, [str(script)], {})
        starts = 5 if quick else 15
        calls = 300 if quick else 2000
        per_caller = 100 if quick else 500
        rows: list[tuple[str, float, float, str]] = []

        sdk_cold = await cold_start(*sdk, starts)
        coven_cold = await cold_start(*coven, starts)
        rows.append(
            (
                "cold start to tools/list, median (ms)",
                statistics.median(coven_cold) * 1e3,
                statistics.median(sdk_cold) * 1e3,
                "<= 0.10",
            )
        )
        sdk_rt = await round_trips(*sdk, calls)
        coven_rt = await round_trips(*coven, calls)
        for name, fraction in (("p50", 0.5), ("p99", 0.99)):
            rows.append(
                (
                    f"tools/call no-op round trip {name} (ms)",
                    percentile(coven_rt, fraction) * 1e3,
                    percentile(sdk_rt, fraction) * 1e3,
                    "<= 1.0",
                )
            )
        sdk_tp = await throughput(*sdk, 8, per_caller, shared_session=False)
        coven_tp = await throughput(*coven, 8, per_caller, shared_session=False)
        rows.append(("throughput, 8 callers x own session (calls/s)", coven_tp, sdk_tp, ">= 1.0"))
        sdk_shared = await throughput(*sdk, 8, per_caller, shared_session=True)
        coven_shared = await throughput(*coven, 8, per_caller, shared_session=True)
        rows.append(("throughput, 8 in flight on 1 session (calls/s)", coven_shared, sdk_shared, ">= 1.0"))
        journal = Path(scratch) / "journal.jsonl"
        journal.touch()
        serve = (sys.executable, ["-m", "coven_codex", "mcp-serve", "--journal", str(journal)], {})
        serve_cold = await cold_start(*serve, starts, first_tool="call_codex")
        rows.append(
            (
                "mcp-serve cold start to tools/list, median (ms)",
                statistics.median(serve_cold) * 1e3,
                statistics.median(sdk_cold) * 1e3,
                "<= 1.0",
            )
        )
    daemon.stdin.close()
    await daemon.wait()

    print(f"{'measure':<50}{'coven':>12}{'SDK':>12}{'ratio':>9}  target")
    for name, ours, theirs, target in rows:
        print(f"{name:<50}{ours:>12.2f}{theirs:>12.2f}{ours / theirs:>9.3f}  {target}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--daemon", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.daemon:
        run_daemon()
    else:
        asyncio.run(bench(options.quick))


if __name__ == "__main__":
    main()
