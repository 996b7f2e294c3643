"""The web page: entry appended → visible in Chromium's DOM, and 100 conversations on one server.

1. Latency. ``coven-codex web`` runs as a subprocess; headless Chromium (Debian's package,
   driven by Playwright) shows a conversation and records, with a MutationObserver, the wall
   time each message appears in the DOM. This process appends entries at a steady rate and
   records the wall time of each append. In the same run, a plain journal tail in this process
   (``FileJournal.tail``) measures append → read of the same entries: the baseline.
2. Scale. 100 live-channel clients (plain WebSocket clients, one per conversation) on one page
   server while entries flow to all 100 conversations: the server's memory (RSS) and CPU per
   entry delivered, against a plain journal tail reading the same entries in this process.

    .venv/bin/python benchmarks/bench_web.py [--quick]
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import psutil
import websockets
from _common import base_parser, cpu_meter, machine_line, ms, print_table, ratio, summarize
from playwright.async_api import async_playwright

from coven_codex.entries import ResponseEntry
from coven_codex.journal import FileJournal, JournalRecord

TOKEN = "bench-token-0123456789abcdefghij"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
OBSERVER = """() => { window.seen = {};
  new MutationObserver((records) => { const now = performance.timeOrigin + performance.now();
    for (const r of records) for (const n of r.addedNodes)
      if (n.id && n.id.startsWith('m-')) window.seen[n.id.slice(2)] = now; })
  .observe(document.getElementById('messages'), {childList: true}); }"""


async def start_server(journal: Path) -> tuple[asyncio.subprocess.Process, int]:
    env = {**os.environ, "COVEN_WEB_TOKEN": TOKEN}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "coven_codex",
        "web",
        "--journal",
        str(journal),
        "--port",
        "0",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        stdin=asyncio.subprocess.DEVNULL,
        env=env,
    )
    assert process.stdout is not None
    line = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
    match = re.search(r"127\.0\.0\.1:(\d+)/", line)
    assert match, f"coven-codex web printed no URL: {line!r}"
    return process, int(match.group(1))


async def stop_server(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 15)
        except TimeoutError:
            process.kill()
            await process.wait()


async def latency(folder: Path, count: int, rate: float) -> None:
    journal_path = folder / "latency.jsonl"
    journal = FileJournal(journal_path, durability="never")
    await journal.append(ResponseEntry(conversation="bench", id="warm", text="warm up"))
    server, port = await start_server(journal_path)
    appended: dict[str, float] = {}
    tailed: dict[str, float] = {}
    try:
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch_persistent_context(
                str(folder / "profile"), executable_path="/usr/bin/chromium", headless=True, args=CHROMIUM_ARGS
            )
            page = await browser.new_page()
            await page.goto(f"http://127.0.0.1:{port}/?token={TOKEN}#c=bench")
            await page.wait_for_selector("#m-warm")
            await page.evaluate(OBSERVER)

            async def tail() -> None:
                async for item in journal.tail(await journal.end_position()):
                    if isinstance(item, JournalRecord) and item.entry.id in appended:
                        tailed[item.entry.id] = time.time()

            follower = asyncio.create_task(tail())
            await asyncio.sleep(0.2)
            for number in range(count):
                entry_id = f"e{number}"
                appended[entry_id] = time.time()
                await journal.append(ResponseEntry(conversation="bench", id=entry_id, text=f"entry {number}"))
                await asyncio.sleep(1 / rate)
            deadline = time.monotonic() + 30
            seen: dict[str, float] = {}
            while time.monotonic() < deadline:
                seen = await page.evaluate("() => window.seen")
                if len(seen) >= count:
                    break
                await asyncio.sleep(0.2)
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower
            await browser.close()
    finally:
        await stop_server(server)
        await journal.aclose()
    dom = summarize([seen[i] / 1000 - t for i, t in appended.items() if i in seen])
    plain = summarize([tailed[i] - t for i, t in appended.items() if i in tailed])
    print_table(
        f"entry appended → visible in Chromium's DOM ({count} entries at {rate:g}/s)",
        ["path", "seen", "p50 ms", "p99 ms", "max ms", "vs plain tail (p50)"],
        [
            ["plain journal tail (baseline)", plain.count, ms(plain.p50), ms(plain.p99), ms(plain.max), "1.0x"],
            [
                "page server → WebSocket → DOM",
                dom.count,
                ms(dom.p50),
                ms(dom.p99),
                ms(dom.max),
                f"{dom.p50 / plain.p50:.1f}x slower" if plain.p50 else "-",
            ],
        ],
    )


async def scale(folder: Path, conversations: int, per_conversation: int) -> None:
    journal_path = folder / "scale.jsonl"
    journal = FileJournal(journal_path, durability="never")
    server, port = await start_server(journal_path)
    process = psutil.Process(server.pid)
    headers = {"Origin": f"http://127.0.0.1:{port}"}
    total = conversations * per_conversation
    received = [0] * conversations
    done = asyncio.Event()
    try:
        rss_idle = process.memory_info().rss
        sockets = []
        for index in range(conversations):
            socket = await websockets.connect(f"ws://127.0.0.1:{port}/live", additional_headers=headers, max_size=None)
            await socket.recv()  # the challenge: log in with the token as the page does
            await socket.send(json.dumps({"type": "login", "token": TOKEN}))
            await socket.send(json.dumps({"type": "subscribe", "conversation": f"c{index}", "after": None}))
            sockets.append(socket)

        async def reader(index: int, socket: websockets.ClientConnection) -> None:
            async for raw in socket:
                message = json.loads(raw)
                if message["type"] == "entries":
                    received[index] += len(message["entries"])
                    if sum(received) >= total:
                        done.set()

        readers = [asyncio.create_task(reader(i, s)) for i, s in enumerate(sockets)]
        await asyncio.sleep(1.0)
        rss_connected = process.memory_info().rss
        cpu_before = sum(process.cpu_times()[:2])
        started = time.monotonic()
        for round_ in range(per_conversation):
            for index in range(conversations):
                await journal.append(ResponseEntry(conversation=f"c{index}", text=f"reply {round_} " + "x" * 200))
        await asyncio.wait_for(done.wait(), 120)
        elapsed = time.monotonic() - started
        cpu_server = sum(process.cpu_times()[:2]) - cpu_before
        rss_loaded = process.memory_info().rss
        for task in readers:
            task.cancel()
        for socket in sockets:
            await socket.close()
    finally:
        await stop_server(server)
    with cpu_meter() as meter:
        baseline = FileJournal(journal_path)
        items = await baseline.read()
        await baseline.aclose()
    assert len(items) == total
    await journal.aclose()
    per_entry = cpu_server / total
    base_per_entry = meter.result.cpu / total
    print_table(
        f"{conversations} conversations on one page server ({total} entries, one client each)",
        ["what", "figure"],
        [
            [
                "server RSS: started / 100 clients connected / after the entries",
                f"{rss_idle / 2**20:.0f} / {rss_connected / 2**20:.0f} / {rss_loaded / 2**20:.0f} MiB",
            ],
            ["all entries delivered in", f"{elapsed:.2f} s ({total / elapsed:,.0f} entries/s)"],
            ["server CPU per entry delivered", f"{per_entry * 1e6:.0f} µs"],
            ["plain journal read of the same entries (baseline)", f"{base_per_entry * 1e6:.0f} µs per entry"],
            [
                "page server vs plain read",
                f"{per_entry / base_per_entry:.1f}x the CPU" if base_per_entry else ratio(per_entry, base_per_entry),
            ],
        ],
    )


async def main() -> None:
    args = base_parser(__doc__ or "").parse_args()
    print(machine_line())
    with tempfile.TemporaryDirectory(prefix="bench-web-") as tmp:
        folder = Path(tmp)
        await latency(folder, 100 if args.quick else 400, 20.0)
        await scale(folder, 100, 5 if args.quick else 20)


if __name__ == "__main__":
    asyncio.run(main())
