"""``/list`` and ``/history`` on a big journal: answered from the adapter's index, against a read per command.

Run: ``.venv/bin/python benchmarks/bench_history.py [--entries 100000] [--commands 200]``

A file journal of ``--entries`` entries (1,000 conversations; each exchange a thought with its
``sender_id``, five deltas, a tool call and its result, the turn's start and end, the reply: 11
entries), then the kit's real :class:`AdapterRunner` on the recording fake platform
(``tests/adapters/fake_platform.py``) started as a first run at the journal's end (``start="end"``:
the index is rebuilt from the whole journal while the runner follows it). Measured in one process:

- the runner's start until it follows the journal, until its index is rebuilt (in the background),
  and the rebuild alone, with the memory the index holds (``tracemalloc``);
- ``/list`` and ``/history 20`` from a user's message to the answer posted (``AdapterRunner.handle``);
- the baseline: what a ``/list`` that reads the journal per command costs (the whole journal read and
  decoded, then its thoughts filtered), and the same read with the index's interest (only the lines
  that may be thoughts or replies decoded).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "adapters"))

from _common import machine_line, ms, percentile, print_table
from fake_platform import RecordingPlatform

from coven_codex.adapters.kit.access import AccessPolicy
from coven_codex.adapters.kit.history import INTEREST, SENDER_ID_FIELD, ChatIndex, sender_id
from coven_codex.adapters.kit.ledger import DeliveryLedger
from coven_codex.adapters.kit.mapping import ChannelMap
from coven_codex.adapters.kit.platform import Address, IncomingMessage, User
from coven_codex.adapters.kit.runner import AdapterRunner, RunnerOptions
from coven_codex.entries import (
    BaseEntry,
    DeltaEntry,
    ResponseEntry,
    StatusEntry,
    ThoughtEntry,
    ToolCallEntry,
    ToolResultEntry,
)
from coven_codex.journal import FileJournal, JournalRecord

CONVERSATIONS = 1000
USERS = 100
PER_EXCHANGE = 11


def _exchange(n: int) -> list[BaseEntry]:
    conversation = f"fake:/c{n % CONVERSATIONS}/"
    user = f"u{n % USERS}"
    thought = ThoughtEntry(
        id=f"t{n}", conversation=conversation, sender=user, text=f"question {n}: why does the build fail " * 3
    ).model_copy(update={SENDER_ID_FIELD: sender_id("fake", user)})
    reply = f"answer {n}: the cache was stale; cleared it and the build passes. " * 4
    return [
        thought,
        StatusEntry(state="turn_started", conversation=conversation, in_reply_to=thought.id),
        *(DeltaEntry(text=reply[i * 40 : (i + 1) * 40], conversation=conversation, item_id=f"i{n}") for i in range(5)),
        ToolCallEntry(tool="shell", arguments={"command": "make test"}, conversation=conversation, call_id=f"c{n}"),
        ToolResultEntry(text="ok " * 50, conversation=conversation, call_id=f"c{n}"),
        ResponseEntry(text=reply, conversation=conversation, in_reply_to=thought.id),
        StatusEntry(state="turn_completed", conversation=conversation, in_reply_to=thought.id),
    ]


async def _write(path: Path, entries: int) -> None:
    journal = FileJournal(path, durability="never")
    try:
        for n in range(entries // PER_EXCHANGE):
            for entry in _exchange(n):
                await journal.append(entry)
    finally:
        await journal.aclose()


async def _read_per_command(journal: FileJournal, who: str, *, interest: bool) -> int:
    """A ``/list`` without the index: read the journal, keep the conversations ``who`` wrote in."""
    found: dict[str, None] = {}
    for item in await journal.read(interest=INTEREST if interest else None):
        if isinstance(item, JournalRecord) and getattr(item.entry, SENDER_ID_FIELD, None) == who:
            found[item.entry.conversation] = None
    return len(found)


def _fake(conversation: str) -> bool:
    return conversation.startswith("fake:")


async def _timed(runner: AdapterRunner, text: str, count: int) -> list[float]:
    times = []
    message = IncomingMessage(Address(channel="c3"), User(id="u3"), text)
    for _ in range(count):
        started = time.perf_counter()
        await runner.handle(message)
        times.append(time.perf_counter() - started)
    return times


async def measure(entries: int, commands: int, folder: Path) -> None:
    path = folder / "journal.jsonl"
    started = time.perf_counter()
    await _write(path, entries)
    print(f"wrote {entries:,} entries ({path.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - started:.1f} s")
    journal = FileJournal(path)
    runner = AdapterRunner(
        journal,
        RecordingPlatform(folder / "record.jsonl", folder / "inbox.jsonl", 4000, 0.2, 0),
        ChannelMap("fake"),
        AccessPolicy(users=None),
        DeliveryLedger.memory(),
        name="fake",
        options=RunnerOptions(start="end"),
    )
    try:
        started = time.perf_counter()
        task = asyncio.create_task(runner.run())
        await runner.ready.wait()
        ready = time.perf_counter() - started
        await runner.index.done.wait()
        indexed = time.perf_counter() - started
        end = await journal.end_position()
        rebuilt = time.perf_counter()
        await ChatIndex().rebuild(journal, end, _fake)
        rebuild = time.perf_counter() - rebuilt
        tracemalloc.start()  # a second rebuild, traced (tracing slows it down)
        index = ChatIndex()
        await index.rebuild(journal, end, _fake)
        for _ in range(3):  # the loop lets go of the read's finished future (and the records it held)
            await asyncio.sleep(0)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        listed = await _timed(runner, "/list", commands)
        history = await _timed(runner, "/history 20", commands)
        answers = [line for line in (folder / "record.jsonl").read_text().splitlines() if "the oldest first" in line]
        assert len(answers) == commands and "question" in answers[-1], answers[-1:]
        full = []
        for _ in range(3):
            begun = time.perf_counter()
            await _read_per_command(journal, sender_id("fake", "u3"), interest=False)
            full.append(time.perf_counter() - begun)
        filtered = []
        for _ in range(3):
            begun = time.perf_counter()
            await _read_per_command(journal, sender_id("fake", "u3"), interest=True)
            filtered.append(time.perf_counter() - begun)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    finally:
        await journal.aclose()
    answer = min(full) / percentile(listed, 0.5)
    print_table(
        f"/list and /history, {entries:,} entries, {CONVERSATIONS:,} conversations ({machine_line()})",
        ["what", "ms", "note"],
        [
            ["runner start → follows the journal", ms(ready), "the index is rebuilt meanwhile"],
            ["runner start → index rebuilt", ms(indexed), "a /list before waits for it (at most 10 s)"],
            ["index rebuild alone", ms(rebuild), f"{index.entries:,} thoughts and replies; {held / 1e6:.1f} MB held"],
            [
                "/list, message → answer posted",
                f"p50 {ms(percentile(listed, 0.5))}, p99 {ms(percentile(listed, 0.99))}",
                f"{commands} commands",
            ],
            [
                "/history 20, message → answer posted",
                f"p50 {ms(percentile(history, 0.5))}, p99 {ms(percentile(history, 0.99))}",
                f"{commands} commands",
            ],
            [
                "baseline: a read per /list, every line decoded",
                f"best {ms(min(full))}",
                f"{answer:,.0f}x the index's p50",
            ],
            ["baseline: a read per /list, with the interest", f"best {ms(min(filtered))}", ""],
        ],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--commands", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(measure(args.entries, args.commands, Path(folder)))


if __name__ == "__main__":
    main()
