"""Agent latency: how fast thoughts reach Codex and rollout lines reach the journal.

Run: ``.venv/bin/python benchmarks/bench_agent.py [--thoughts 100] [--lines 500]``

Part 1, the real Codex 0.169.0 app-server against the scripted model server (echo), with the
daemon running in this process (``run_daemon`` with instrumentation hooks; same clock,
``time.perf_counter``). Thoughts go one at a time to one conversation, each after the previous
turn completed (plus 50 ms), so no queueing is measured:

- *thought appended → bytes on Codex stdin*: from calling ``journal.append()`` to the moment
  the driver wrote the ``turn/start`` line (matched by ``clientUserMessageId``) into Codex's
  stdin pipe (:class:`WireTap`). Baseline: the same append seen by a plain journal tail in this
  process.
- *journal entry behind app-server's ``item/completed``*: for each reply, from the moment the
  driver read app-server's ``item/completed`` notification of the agent message to the moment
  egress finished appending the ``response`` entry for the same item (from the rollout line).

Part 2, egress alone on a synthetic rollout (lines of a recorded 0.169 rollout written one by one
with pauses): *rollout line written → entry in journal*, from ``write()`` returning to the append
of its entry. Baselines: a plain ``tail_lines`` on the same file seeing the same line, and that
tail plus one plain journal append per line (what egress costs beyond translating).
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
from pathlib import Path

import tomlkit

from coven_codex.agent.egress import AppendHook, Egress
from coven_codex.agent.replay import ReplayWindow
from coven_codex.agent.saver import StateSaver
from coven_codex.agent.state import SessionState, StateStore
from coven_codex.agent.writer import DaemonWriter
from coven_codex.daemon.bootstrap import Hooks, run_daemon
from coven_codex.entries import BaseEntry, ThoughtEntry
from coven_codex.journal import FileJournal, JournalRecord
from coven_codex.settings import Settings
from coven_codex.tailing import Line, tail_lines
from coven_codex.testing.codex_config import DEFAULT_ENV_KEY, codex_config
from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.responders import echo_responder

ROOT = Path(__file__).resolve().parent.parent
CODEX = ROOT / ".codex-cli" / "0.169.0" / "node_modules" / ".bin" / "codex"
FIXTURE = ROOT / "tests" / "fixtures" / "rollouts" / "0.169.0" / "multi_turn.jsonl"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def row(name: str, values_s: list[float], baseline_s: list[float] | None = None) -> str:
    ms = [v * 1000 for v in values_s]
    p50, p99 = statistics.median(ms), pct(ms, 0.99)
    text = f"{name:<52} {len(ms):>5} {p50:>9.2f} {p99:>9.2f}"
    if baseline_s:
        base = statistics.median(baseline_s) * 1000
        text += f" {base:>9.2f} {p50 / base if base else float('inf'):>7.1f}x"
    return text


class WireTap:
    """Timestamps of the daemon's pipe traffic with Codex, taken inside asyncio's stream classes.

    The driver writes JSON-RPC lines with ``StreamWriter.write`` and reads them with
    ``StreamReader.readline``; wrapping both (in this benchmark process only) times the moment
    ``turn/start`` bytes go into Codex's stdin and the moment an ``item/completed`` line is read.
    """

    def __init__(self) -> None:
        self.stdin_at: dict[str, float] = {}
        self.notified_at: dict[str, float] = {}
        self._write = asyncio.StreamWriter.write
        self._readline = asyncio.StreamReader.readline

    def __enter__(self) -> WireTap:
        tap = self
        original_write, original_readline = self._write, self._readline

        def write(writer: asyncio.StreamWriter, data: bytes | bytearray | memoryview) -> None:
            original_write(writer, data)
            if b'"turn/start"' in data:
                now = time.perf_counter()
                message = json.loads(bytes(data))
                tap.stdin_at[str(message["params"].get("clientUserMessageId"))] = now

        async def readline(reader: asyncio.StreamReader) -> bytes:
            line = await original_readline(reader)
            if b'"item/completed"' in line and b'"agentMessage"' in line:
                now = time.perf_counter()
                item = json.loads(line)["params"]["item"]
                tap.notified_at[str(item.get("id"))] = now
            return line

        asyncio.StreamWriter.write = write  # type: ignore[method-assign,assignment]  # benchmark-only wrap
        asyncio.StreamReader.readline = readline  # type: ignore[method-assign,assignment]  # benchmark-only wrap
        return self

    def __exit__(self, *_exc: object) -> None:
        asyncio.StreamWriter.write = self._write  # type: ignore[method-assign]  # restore
        asyncio.StreamReader.readline = self._readline  # type: ignore[method-assign]  # restore


async def part_app_server(thoughts: int) -> list[str]:
    appended_at: dict[str, float] = {}

    def on_append(line: Line, entry: BaseEntry, t: float) -> None:
        item_id = getattr(entry, "item_id", None)
        if entry.kind == "response" and item_id is not None:
            appended_at[str(item_id)] = t

    with WireTap() as tap:
        return await _run_app_server(thoughts, tap, appended_at, on_append)


async def _run_app_server(
    thoughts: int, tap: WireTap, appended_at: dict[str, float], on_append: AppendHook
) -> list[str]:
    stdin_at, notified_at = tap.stdin_at, tap.notified_at
    with tempfile.TemporaryDirectory(prefix="bench-agent-") as tmp_name:
        tmp = Path(tmp_name)
        workspace = tmp / "ws"
        workspace.mkdir()
        async with ScriptedModelServer(responder=echo_responder) as server:
            base = tmp / "base.toml"
            base.write_text(tomlkit.dumps(codex_config(server.base_url)))
            os.environ[DEFAULT_ENV_KEY] = "bench"
            settings = Settings(
                workspace=workspace,
                journal=tmp / "journal.jsonl",
                codex_config=base,
                codex_path=str(CODEX),
                durability="batched",
                state_dir=tmp / "state",
            )
            stop = asyncio.Event()
            ready = asyncio.Event()
            daemon = asyncio.create_task(run_daemon(settings, stop, ready=ready.set, hooks=Hooks(on_append=on_append)))
            await ready.wait()
            journal = FileJournal(tmp / "journal.jsonl", durability="batched")
            tail_seen: dict[str, float] = {}
            replies = asyncio.Queue[str]()

            async def watch() -> None:
                async for item in journal.tail():
                    if isinstance(item, JournalRecord):
                        now = time.perf_counter()
                        if item.entry.kind == "thought" and item.entry.id:
                            tail_seen[item.entry.id] = now
                        elif item.entry.kind == "status" and getattr(item.entry, "state", "") == "turn_completed":
                            replies.put_nowait(item.entry.text)

            watcher = asyncio.create_task(watch())
            appended: dict[str, float] = {}
            for index in range(thoughts + 3):
                thought = ThoughtEntry(id=f"bench-{index}", conversation="bench", text=f"thought {index}")
                appended[str(thought.id)] = time.perf_counter()
                await journal.append(thought)
                await asyncio.wait_for(replies.get(), 60)
                await asyncio.sleep(0.05)  # let the daemon see turn/completed: measure latency, not queueing
            stop.set()
            await daemon
            watcher.cancel()
            await journal.aclose()
    warm = list(appended)[3:]  # the first turns include starting Codex
    ingress = [stdin_at[i] - appended[i] for i in warm if i in stdin_at]
    baseline = [tail_seen[i] - appended[i] for i in warm if i in tail_seen]
    trail = [appended_at[i] - notified_at[i] for i in notified_at if i in appended_at][3:]
    return [
        row("thought appended -> bytes on Codex stdin", ingress, baseline),
        row("journal entry behind app-server item/completed", trail),
    ]


async def part_egress(lines: int) -> list[str]:
    source = [line for line in FIXTURE.read_bytes().split(b"\n") if line]
    with tempfile.TemporaryDirectory(prefix="bench-egress-") as tmp_name:
        tmp = Path(tmp_name)
        rollout = tmp / "rollout.jsonl"
        rollout.write_bytes(b"")
        journal = FileJournal(tmp / "journal.jsonl", durability="batched")
        state = SessionState(conversation="bench", thread_id="t")
        appended: dict[int, float] = {}

        def on_append(line: Line, entry: BaseEntry, t: float) -> None:
            appended.setdefault(line.start, t)

        store = StateStore(tmp / "state", durability="batched")
        store.prepare()
        # A busy session: its replay window is opened (saved) once, before the first line's entries.
        window = ReplayWindow(state, StateSaver(state, store), journal)
        writer = DaemonWriter(journal, set())
        egress = Egress(state=state, writer=writer, window=window, on_progress=lambda: None, on_append=on_append)
        seen: dict[int, float] = {}
        copied: dict[int, float] = {}
        copy_journal = FileJournal(tmp / "copy.jsonl", durability="batched")

        async def raw_tail() -> None:
            async for line in tail_lines(rollout, 0):
                seen[line.start] = time.perf_counter()

        async def tail_and_append() -> None:
            # Second baseline: the same tail plus one plain journal append per line (no translation).
            async for line in tail_lines(rollout, 0):
                await copy_journal.append(ThoughtEntry(text=str(line.start)))
                copied[line.start] = time.perf_counter()

        tasks = [
            asyncio.create_task(egress.run(rollout, "t")),
            asyncio.create_task(raw_tail()),
            asyncio.create_task(tail_and_append()),
        ]
        await asyncio.sleep(0.2)
        written: dict[int, float] = {}
        offset = 0
        with rollout.open("ab", buffering=0) as handle:
            for index in range(lines):
                data = source[index % len(source)] + b"\n"
                handle.write(data)
                written[offset] = time.perf_counter()
                offset += len(data)
                await asyncio.sleep(0.004)
        await asyncio.sleep(0.5)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await journal.aclose()
        await copy_journal.aclose()
        store.close()
    latency = [appended[o] - written[o] for o in appended if o in written]
    baseline = [seen[o] - written[o] for o in seen if o in written]
    with_append = [copied[o] - written[o] for o in copied if o in written]
    return [
        row("rollout line written -> entry in journal", latency, baseline),
        row("  baseline: plain tail + plain journal append", with_append, baseline),
    ]


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--thoughts", type=int, default=100)
    parser.add_argument("--lines", type=int, default=500)
    args = parser.parse_args(argv)
    header = f"{'measure':<52} {'n':>5} {'p50 ms':>9} {'p99 ms':>9} {'base ms':>9} {'ratio':>8}"
    rows = await part_app_server(args.thoughts)
    rows += await part_egress(args.lines)
    print(header)
    print("-" * len(header))
    for line in rows:
        print(line)
    print(
        "\nbase: p50 of the baseline measured in the same run (a plain journal tail for ingress, a plain "
        "tail_lines on the rollout for egress); ratio = p50 / base p50."
    )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
