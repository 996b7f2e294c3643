"""The design card's packages against what replaced them, measured in the same run (issue 34).

    .venv/bin/python benchmarks/bench_deps.py [--quick]

Three comparisons, each with its baseline measured in the same run (docs/architecture.md,
"Dependencies against the design card"; figures in docs/performance.md):

1. **watchfiles**: the watchfiles waker on the public ``watchfiles.watch()`` (what the tailer runs
   where inotify is missing) against the waker the project used before, on the private
   ``watchfiles._rust_notify.RustNotify``: append -> woken latency (a writer process appending at
   1,000 lines/s) and idle CPU. Both wakers run in the same small read loop.
2. **aiofiles**: the tailer's read path (``tail_lines``: ``os.pread`` of 1 MiB chunks on the event
   loop, complete lines split out) against ``aiofiles`` reading the same file: line by line
   (``async for line in file``) and in 1 MiB chunks split the same way.
3. **jsonrpcserver**: the project's JSON-RPC peer (``coven_codex.jsonrpc``) serving requests from a
   method table, against ``jsonrpcserver.async_dispatch`` of the same lines; the peer's requests out
   with their responses matched on the same stream (what a bidirectional peer needs, and a
   request dispatcher does not do); and the import cost of each.

``aiofiles`` and ``jsonrpcserver`` are not dependencies of the package: install them with the
``bench`` extra (``.venv/bin/python -m pip install -e '.[bench]'``). Without them their rows are
left out, said so, and the benchmark still succeeds. The same holds for the private RustNotify.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from _common import Summary, base_parser, cpu_meter, machine_line, ms, print_table, summarize

from coven_codex.jsonrpc import JsonRpcPeer, ServedRequest, Serving
from coven_codex.tailing import Line, LineSplitter, tail_lines
from coven_codex.tailing.wakers import WATCHFILES_DEBOUNCE_MS, WATCHFILES_STEP_MS, InotifyWaker, WatchfilesWaker

BENCH_EXTRA = ".venv/bin/python -m pip install -e '.[bench]'"

WRITER = textwrap.dedent(
    """
    import os, sys, time
    path, rate, count = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    interval = 1e9 / rate
    start = time.monotonic_ns()
    for number in range(count):
        due = start + number * interval
        wait = due - time.monotonic_ns()
        if wait > 0:
            time.sleep(wait / 1e9)
        os.write(fd, f"{time.monotonic_ns()} {number} {'x' * 100}\\n".encode())
    os.close(fd)
    """
)


def optional(name: str) -> ModuleType | None:
    """The comparison package ``name``, or None (then say so: its rows are left out)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        print(f"\n{name} is not installed ({exc}): its rows are left out. Install it with: {BENCH_EXTRA}")
        return None


def ratio_to(value: float, baseline: float) -> str:
    """``value`` as a multiple of ``baseline`` (``0.5x`` = half of it)."""
    if not baseline or math.isnan(value) or math.isnan(baseline):
        return "-"
    return f"{value / baseline:.2f}x"


# -- 1. watchfiles: the public watch() against the private RustNotify ---------------------------


class Waker(Protocol):
    @property
    def dead(self) -> bool: ...

    async def wait(self) -> None: ...

    async def aclose(self) -> None: ...


class PrivateRustNotifyWaker:
    """The waker of commit 24169e3 (before issue 34), on ``watchfiles._rust_notify.RustNotify``,
    kept here as the baseline only: same step, same debounce, same thread of its own."""

    def __init__(self, rust_notify: Any, directory: Path, name: str) -> None:
        self._directory = str(directory)
        self._name = name
        self._stop = threading.Event()
        self._pending: asyncio.Future[object] | None = None
        # debug, force_polling, poll_delay_ms, recursive, ignore_permission_denied
        self._notify = rust_notify([str(directory)], False, False, 0, False, False)
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bench-rustnotify")

    @property
    def dead(self) -> bool:
        return False

    async def wait(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if self._pending is None:
                self._pending = loop.run_in_executor(
                    self._thread, self._notify.watch, WATCHFILES_DEBOUNCE_MS, WATCHFILES_STEP_MS, 0, self._stop
                )
            result = await asyncio.shield(self._pending)
            self._pending = None
            if not isinstance(result, set) or any(os.path.basename(path) == self._name for _c, path in result):
                return

    async def aclose(self) -> None:
        self._stop.set()
        if self._pending is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._pending)
        self._notify.close()
        self._thread.shutdown(wait=False)


class Reader(Protocol):
    async def read(self, offset: int) -> bytes: ...

    async def aclose(self) -> None: ...


class PreadReader:
    """The tailer's read: ``os.pread`` on the event loop (page-cache bytes: microseconds)."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_RDONLY)

    async def read(self, offset: int) -> bytes:
        return os.pread(self._fd, 1 << 20, offset)

    async def aclose(self) -> None:
        os.close(self._fd)


class AiofilesReader:
    """The same reads through ``aiofiles`` (each one handed to a worker thread and back)."""

    def __init__(self, aiofiles: Any, path: Path) -> None:
        self._aiofiles = aiofiles
        self._path = path
        self._file: Any = None

    async def read(self, offset: int) -> bytes:
        if self._file is None:
            self._file = await self._aiofiles.open(self._path, "rb")
            await self._file.seek(offset)
        data: bytes = await self._file.read(1 << 20)  # sequential: the file only grows
        return data

    async def aclose(self) -> None:
        if self._file is not None:
            await self._file.close()


async def read_loop(waker: Waker, reader: Reader, count: int, latencies: list[float]) -> None:
    """The tailer's loop in small: read every complete line, then wait on the waker."""
    splitter = LineSplitter(0)
    while True:
        while chunk := await reader.read(splitter.offset):
            now = time.monotonic_ns()
            for line in splitter.feed(chunk):
                latencies.append((now - int(line.data.split(b" ", 1)[0])) / 1e9)
        if len(latencies) >= count:
            return
        await waker.wait()


async def waker_latency(
    make: Any, directory: Path, rate: float, count: int, make_reader: Any = PreadReader
) -> tuple[Summary, float]:
    """Append -> read latency with a writer process at ``rate``, and this process's CPU ms per 1,000 lines."""
    path = directory / f"latency-{time.monotonic_ns()}.log"
    path.touch()
    waker: Waker = make(directory, path.name)
    reader: Reader = make_reader(path)
    latencies: list[float] = []
    try:
        with cpu_meter() as meter:
            reading = asyncio.create_task(read_loop(waker, reader, count, latencies))
            await asyncio.sleep(0.3)  # the watch is set up
            writer = await asyncio.create_subprocess_exec(
                sys.executable, "-c", WRITER, str(path), str(rate), str(count)
            )
            await writer.wait()
            await asyncio.wait_for(reading, 30)
    finally:
        await reader.aclose()
        await waker.aclose()
        path.unlink()
    return summarize(latencies), meter.result.cpu * 1000 / count * 1000


async def waker_idle(make: Any, directory: Path, seconds: float) -> tuple[float, float]:
    """CPU ms and wake-ups/s of the whole process while a waker waits on a quiet file."""
    path = directory / f"idle-{time.monotonic_ns()}.log"
    path.touch()
    waker: Waker = make(directory, path.name)
    waiting = asyncio.create_task(waker.wait())
    await asyncio.sleep(0.3)
    if waiting.done():  # the public waker's first wait returns once it watches
        waiting = asyncio.create_task(waker.wait())
        await asyncio.sleep(0.2)
    with cpu_meter() as meter:
        await asyncio.sleep(seconds)
    waiting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiting
    await waker.aclose()
    path.unlink()
    return meter.result.cpu * 1000, meter.result.voluntary_switches / meter.result.wall


async def bench_watchfiles(directory: Path, quick: bool) -> None:
    try:
        from watchfiles._rust_notify import RustNotify
    except ImportError as exc:
        print(f"\nwatchfiles' private RustNotify cannot be imported ({exc}): only the public waker is measured")
        private = None
    else:
        private = RustNotify
    makers: dict[str, Any] = {"public watch() (the project's waker)": WatchfilesWaker}
    if private is not None:
        makers["private RustNotify (before issue 34, baseline)"] = lambda d, n: PrivateRustNotifyWaker(private, d, n)
    rate, count = 1000.0, 1000 if quick else 5000
    idle_seconds = 2.0 if quick else 10.0
    results: dict[str, tuple[Summary, float, float]] = {}
    for _round in range(1 if quick else 2):  # alternate, so the machine's load falls on both alike
        for name, make in makers.items():
            latency, _cpu = await waker_latency(make, directory, rate, count)
            cpu, wakeups = await waker_idle(make, directory, idle_seconds)
            if name not in results or latency.p50 < results[name][0].p50:
                results[name] = (latency, cpu, wakeups)
    base = results.get("private RustNotify (before issue 34, baseline)")
    rows = []
    for name, (latency, cpu, wakeups) in results.items():
        rows.append(
            [
                name,
                latency.count,
                ms(latency.p50),
                ms(latency.p99),
                ratio_to(latency.p50, base[0].p50) if base else "-",
                f"{cpu:.1f}",
                f"{wakeups:.0f}",
                ratio_to(cpu, base[1]) if base else "-",
            ]
        )
    print_table(
        f"watchfiles waker: append -> woken at {rate:,.0f} lines/s (best of rounds), idle {idle_seconds:g} s",
        ["waker", "lines", "p50 ms", "p99 ms", "p50 vs baseline", "idle CPU ms", "wake-ups/s", "idle CPU vs baseline"],
        rows,
    )


# -- 2. aiofiles: the tailer's read path against aiofiles on the same file ---------------------


def make_file(directory: Path, lines: int) -> Path:
    path = directory / "read.log"
    line = json.dumps({"kind": "response", "conversation": "red", "text": "y" * 180}).encode() + b"\n"
    with path.open("wb") as file:
        for _ in range(lines // 1000):
            file.write(line * 1000)
    return path


async def read_with_tailer(path: Path, lines: int) -> int:
    seen = 0
    tail = tail_lines(path)
    async with contextlib.aclosing(tail):
        async for _line in tail:
            seen += 1
            if seen == lines:
                break
    return seen


async def read_with_aiofiles_lines(aiofiles: Any, path: Path, lines: int) -> int:
    seen = 0
    async with aiofiles.open(path, "rb") as file:
        async for _line in file:
            seen += 1
    return seen


async def aiofiles_lines(aiofiles: Any, path: Path) -> AsyncIterator[Line]:
    """The tailer's read loop with aiofiles underneath: 1 MiB reads (each in a worker thread),
    the same splitter, each line yielded as ``tail_lines`` yields it."""
    splitter = LineSplitter(0)
    async with aiofiles.open(path, "rb") as file:
        while chunk := await file.read(1 << 20):
            for line in splitter.feed(chunk):
                yield line


async def read_with_aiofiles_chunks(aiofiles: Any, path: Path, lines: int) -> int:
    seen = 0
    async for _line in aiofiles_lines(aiofiles, path):
        seen += 1
    return seen


async def loop_stall(during: Any) -> tuple[float, float]:
    """Run ``during`` while a ticker measures how late the event loop answers (p99, max ms)."""
    lateness: list[float] = []
    stop = asyncio.Event()

    async def tick() -> None:
        while not stop.is_set():
            due = time.perf_counter() + 0.001
            await asyncio.sleep(0.001)
            lateness.append(time.perf_counter() - due)

    ticker = asyncio.create_task(tick())
    try:
        await during
    finally:
        stop.set()
        await ticker
    summary = summarize(lateness)
    return summary.p99, summary.max


async def bench_aiofiles(directory: Path, quick: bool) -> None:
    aiofiles = optional("aiofiles")
    await bench_aiofiles_appends(aiofiles, directory, quick)
    await bench_aiofiles_catch_up(aiofiles, directory, quick)


async def bench_aiofiles_appends(aiofiles: Any, directory: Path, quick: bool) -> None:
    """What the tailer does all day: an inotify wake-up, then a read of the line or two appended."""
    rate, count = 1000.0, 1000 if quick else 5000
    readers: dict[str, Any] = {"os.pread on the loop (the tailer's read)": PreadReader}
    if aiofiles is not None:
        readers["aiofiles read (baseline)"] = lambda path: AiofilesReader(aiofiles, path)
    results: dict[str, tuple[Summary, float]] = {}
    for _round in range(1 if quick else 2):
        for name, make_reader in readers.items():
            summary, cpu = await waker_latency(InotifyWaker, directory, rate, count, make_reader)
            if name not in results or summary.p50 < results[name][0].p50:
                results[name] = (summary, cpu)
    base = results.get("aiofiles read (baseline)")
    print_table(
        f"append -> read at {rate:,.0f} lines/s, woken by inotify (best of rounds)",
        ["read", "lines", "p50 ms", "p99 ms", "p50 vs baseline", "CPU ms per 1,000 lines", "CPU vs baseline"],
        [
            [
                name,
                summary.count,
                ms(summary.p50),
                ms(summary.p99),
                ratio_to(summary.p50, base[0].p50) if base else "-",
                f"{cpu:.1f}",
                ratio_to(cpu, base[1]) if base else "-",
            ]
            for name, (summary, cpu) in results.items()
        ],
    )


SLOW_READER = "aiofiles, async for line in file"


async def bench_aiofiles_catch_up(aiofiles: Any, directory: Path, quick: bool) -> None:
    """What a restart does: read a long file from the start."""
    lines = 50_000 if quick else 200_000
    path = make_file(directory, lines)
    size_mb = path.stat().st_size / 1e6
    readers: dict[str, Any] = {"tail_lines (the tailer's read path)": lambda: read_with_tailer(path, lines)}
    if aiofiles is not None:
        readers["aiofiles, 1 MiB reads, same splitter, line by line (baseline)"] = lambda: read_with_aiofiles_chunks(
            aiofiles, path, lines
        )
        readers[SLOW_READER] = lambda: read_with_aiofiles_lines(aiofiles, path, lines)
    results: dict[str, tuple[float, float, float, float]] = {}
    for round_number in range(1 if quick else 3):
        for name, read in readers.items():
            if round_number and name == SLOW_READER:
                continue  # 40-70x the others: once is enough to tell
            with cpu_meter() as meter:
                stall_p99, stall_max = await loop_stall(read())
            best = results.get(name)
            if best is None or meter.result.cpu < best[0]:
                results[name] = (meter.result.cpu, meter.result.wall, stall_p99, stall_max)
    base = results.get("aiofiles, 1 MiB reads, same splitter, line by line (baseline)")
    rows = [
        [
            name,
            f"{cpu:.3f}",
            f"{wall:.3f}",
            f"{size_mb / cpu:.0f}",
            ratio_to(cpu, base[0]) if base else "-",
            ms(stall_p99),
            ms(stall_max),
        ]
        for name, (cpu, wall, stall_p99, stall_max) in results.items()
    ]
    print_table(
        f"reading {lines:,} lines ({size_mb:.1f} MB) from the start, best of rounds (CPU of the whole process)",
        ["reader", "CPU s", "wall s", "MB/s (CPU)", "CPU vs baseline", "loop late p99 ms", "loop late max ms"],
        rows,
    )


# -- 3. jsonrpcserver: the project's peer against jsonrpcserver's dispatch ---------------------


def request_lines(count: int) -> list[bytes]:
    return [
        json.dumps({"jsonrpc": "2.0", "id": number, "method": "ping", "params": {"n": number}}).encode()
        for number in range(count)
    ]


async def serve_with_peer(lines: list[bytes]) -> int:
    answers: list[bytes] = []

    async def ping(request: ServedRequest) -> Any:
        return {"n": request.params["n"]}

    async def drain(_within: float) -> None:
        return None

    peer = JsonRpcPeer(answers.append, drain, on_request=Serving({"ping": ping}), on_notification=lambda m, p: None)
    for line in lines:
        await peer.feed(line)
    await peer.settle(30)
    return len(answers)


async def serve_with_jsonrpcserver(jsonrpcserver: Any, lines: list[bytes]) -> int:
    async def ping(n: int) -> Any:
        return jsonrpcserver.Success({"n": n})

    methods = {"ping": ping}
    answers = [await jsonrpcserver.async_dispatch(line.decode(), methods=methods) for line in lines]
    return len(answers)


async def round_trips(count: int) -> int:
    """Two peers on one in-memory stream each way: requests out, responses matched to them."""
    client: JsonRpcPeer
    server: JsonRpcPeer
    to_server: asyncio.Queue[bytes] = asyncio.Queue()

    async def drain(_within: float) -> None:
        return None

    async def ping(request: ServedRequest) -> Any:
        return {"n": request.params["n"]}

    def to_client(line: bytes) -> None:
        asyncio.get_running_loop().create_task(client.feed(line.rstrip(b"\n")))

    client = JsonRpcPeer(
        lambda line: to_server.put_nowait(line.rstrip(b"\n")),
        drain,
        on_request=lambda i, m, p: None,
        on_notification=lambda m, p: None,
    )
    server = JsonRpcPeer(to_client, drain, on_request=Serving({"ping": ping}), on_notification=lambda m, p: None)

    async def pump() -> None:
        while True:
            await server.feed(await to_server.get())

    pumping = asyncio.create_task(pump())
    try:
        for number in range(count):
            result = await client.request("ping", {"n": number}, within=10)
            assert result == {"n": number}
    finally:
        pumping.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pumping
    return count


PYDANTIC = "from pydantic import BaseModel, JsonValue, TypeAdapter"
"""What every daemon imports anyway (its entries are pydantic models): the import baseline."""


def import_cost(module: str, repeats: int) -> tuple[float, float]:
    """Median CPU ms and peak RSS MB (``VmHWM``) of a fresh interpreter importing pydantic and ``module``."""
    script = textwrap.dedent(
        f"""
        import re, time
        {PYDANTIC}
        {"import " + module if module else ""}
        status = open("/proc/self/status").read()
        print(time.process_time(), re.search(r"VmHWM:\\s+(\\d+)", status).group(1))
        """
    )
    cpu: list[float] = []
    rss: list[float] = []
    for _ in range(repeats):
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=Path(__file__).parent.parent
        )
        seconds, kilobytes = done.stdout.split()
        cpu.append(float(seconds) * 1000)
        rss.append(int(kilobytes) / 1024)
    return statistics.median(cpu), statistics.median(rss)


async def bench_jsonrpc(quick: bool) -> None:
    jsonrpcserver = optional("jsonrpcserver")
    count = 5_000 if quick else 20_000
    lines = request_lines(count)
    servers: dict[str, Any] = {"coven_codex.jsonrpc peer, Serving": lambda: serve_with_peer(lines)}
    if jsonrpcserver is not None:
        servers["jsonrpcserver.async_dispatch (baseline)"] = lambda: serve_with_jsonrpcserver(jsonrpcserver, lines)
    results: dict[str, float] = {}
    for _round in range(1 if quick else 3):
        for name, serve in servers.items():
            with cpu_meter() as meter:
                answered = await serve()
            assert answered == count, (name, answered)
            results[name] = min(results.get(name, float("inf")), meter.result.cpu)
    base = results.get("jsonrpcserver.async_dispatch (baseline)")
    trips = 2_000 if quick else 10_000
    with cpu_meter() as meter:
        await round_trips(trips)
    rows: list[list[object]] = [
        [
            f"serve {count:,} requests (parse, dispatch, answer): {name}",
            f"{cpu / count * 1e6:.1f}",
            f"{count / cpu:,.0f}",
            ratio_to(cpu, base) if base else "-",
        ]
        for name, cpu in results.items()
    ]
    rows.append(
        [
            f"{trips:,} requests out, responses matched, on one stream: coven_codex.jsonrpc peer (both sides)",
            f"{meter.result.cpu / trips * 1e6:.1f}",
            f"{trips / meter.result.cpu:,.0f}",
            "-",
        ]
    )
    if jsonrpcserver is not None:
        rows.append(["the same with jsonrpcserver", "-", "-", "not offered: it dispatches requests, it sends none"])
    print_table(
        "JSON-RPC: CPU per message (best of rounds)",
        ["what", "CPU µs per request", "requests/s (CPU)", "CPU vs jsonrpcserver"],
        rows,
    )
    repeats = 3 if quick else 7
    bare_cpu, bare_rss = import_cost("", repeats)
    imports = {"coven_codex.jsonrpc": import_cost("coven_codex.jsonrpc", repeats)}
    if jsonrpcserver is not None:
        imports["jsonrpcserver"] = import_cost("jsonrpcserver", repeats)
    print_table(
        f"import in a fresh interpreter that has pydantic (median of {repeats}; that interpreter alone,"
        f" {bare_cpu:.0f} ms CPU and {bare_rss:.0f} MB, subtracted)",
        ["module", "CPU ms", "peak RSS MB"],
        [[name, f"{cpu - bare_cpu:.0f}", f"{rss - bare_rss:.1f}"] for name, (cpu, rss) in imports.items()],
    )
    print(
        "\n(pydantic is imported by every daemon for its entries, so it is in the baseline; jsonrpcserver"
        " brings jsonschema.)"
    )


async def main() -> None:
    args = base_parser(__doc__ or "").parse_args()
    print(f"bench_deps: {machine_line()}")
    directory = Path(tempfile.mkdtemp(prefix="coven-bench-deps-"))
    try:
        await bench_watchfiles(directory, args.quick)
        await bench_aiofiles(directory, args.quick)
        await bench_jsonrpc(args.quick)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    print(f"\nbench_deps: done; {machine_line()}")


if __name__ == "__main__":
    logging.basicConfig(level=logging.ERROR)
    asyncio.run(main())
