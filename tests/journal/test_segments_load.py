"""Segment roll-over under load (issue 18): 5 readers tail while 100,000 entries are appended across
roll-overs by two writer processes; the 3 reader processes are killed with SIGKILL at random and
restarted, the 2 in-process readers are cancelled and restarted. Retention deletes the segments
every cursor has passed, meanwhile as far as the readers' pace allows, and at the next roll-over
after they are done. Every reader sees every entry exactly once, in the same order.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from coven_codex.entries import ThoughtEntry
from coven_codex.journal import START, FileJournal, JournalRecord, Position
from coven_codex.journal.segments import SegmentLayout

HERE = Path(__file__).parent
WRITERS = 2
PER_WRITER = 50_000
SEGMENT_BYTES = 256 * 1024
PROCESS_READERS = 3
TASK_READERS = 2
KILLS = 8
"""Reader processes killed with SIGKILL, at random points of their progress."""

WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from coven_codex.entries import ThoughtEntry
    from coven_codex.journal import FileJournal

    async def main() -> None:
        name, count = sys.argv[2], int(sys.argv[3])
        journal = FileJournal(
            Path(sys.argv[1]), segment_bytes=int(sys.argv[4]), durability="never", retention="delete"
        )
        for i in range(count):
            await journal.append(ThoughtEntry(id=f"{name}-{i}", conversation=name, text=f"entry {i} of {name}"))
        await journal.append(ThoughtEntry(id=f"stop-{name}", text="stop"))
        await journal.aclose()

    asyncio.run(main())
    """
)


async def reader_process(path: Path, name: str, output: Path) -> asyncio.subprocess.Process:
    """Start (or restart) reader ``name`` in its own process."""
    return await asyncio.create_subprocess_exec(
        sys.executable, str(HERE / "segment_reader_process.py"), str(path), name, str(output), str(WRITERS)
    )


async def task_reader(path: Path, name: str, seen: list[str], rng: random.Random) -> None:
    """An in-process reader, cancelled and restarted from its last item at random; saves its cursor."""
    journal = FileJournal(path)
    start: Position = START
    await journal.save_cursor(name, START)
    stops = 0
    while stops < WRITERS:
        budget = rng.randint(2_000, 30_000)
        async with contextlib.aclosing(journal.tail(start)) as items:
            async for item in items:
                assert isinstance(item, JournalRecord), item
                seen.append(item.entry.id or "")
                start = item.end
                stops += item.entry.text == "stop"
                budget -= 1
                if budget == 0 or stops == WRITERS:
                    break
        await journal.save_cursor(name, start)  # "restart": a new tail from where this one stopped
    await journal.aclose()


def read_output(output: Path) -> list[str]:
    return [line.split("\t")[0] for line in output.read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.timeout(1500)
async def test_100000_entries_across_roll_overs_with_readers_killed_at_random(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    rng = random.Random(18)
    outputs = {f"p{n}": tmp_path / f"p{n}.out" for n in range(PROCESS_READERS)}
    processes = {name: await reader_process(path, name, output) for name, output in outputs.items()}
    cursors = tmp_path / "chat.jsonl.cursors"
    # every reader has a cursor before anything is written: retention keeps what they have not read
    for _ in range(600):
        if all((cursors / f"{name}.json").exists() for name in outputs):
            break
        await asyncio.sleep(0.1)
    seen: dict[str, list[str]] = {f"t{n}": [] for n in range(TASK_READERS)}
    tasks = [
        asyncio.create_task(task_reader(path, name, ids, random.Random(n)))
        for n, (name, ids) in enumerate(seen.items())
    ]
    writers = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-c", WRITER, str(path), f"w{n}", str(PER_WRITER), str(SEGMENT_BYTES)
        )
        for n in range(WRITERS)
    ]
    kills = 0
    writing = asyncio.ensure_future(asyncio.gather(*(writer.wait() for writer in writers)))
    # Kills fall at random points of the readers' progress (bytes they have written out), not at
    # random times: however fast or slow the machine, every one of them lands mid-stream.
    total = PROCESS_READERS * (WRITERS * PER_WRITER + WRITERS) * len("w0-49999\t\n")
    kill_points = sorted(rng.uniform(0.05, 0.9) * total for _ in range(KILLS))
    while kill_points:
        running = [name for name, p in processes.items() if p.returncode is None]
        if not running:
            break
        progress = sum(output.stat().st_size for output in outputs.values() if output.exists())
        if progress < kill_points[0]:
            await asyncio.sleep(0.05)
            continue
        kill_points.pop(0)
        victim = rng.choice(running)
        processes[victim].send_signal(signal.SIGKILL)
        await processes[victim].wait()
        kills += 1
        processes[victim] = await reader_process(path, victim, outputs[victim])
    assert await writing == [0] * WRITERS
    for process in processes.values():
        assert await process.wait() == 0
    await asyncio.gather(*tasks)
    assert kills == KILLS

    expected = {f"w{n}-{i}" for n in range(WRITERS) for i in range(PER_WRITER)} | {f"stop-w{n}" for n in range(WRITERS)}
    sequences = {name: read_output(output) for name, output in outputs.items()} | seen
    reference = sequences["t0"]
    for name, ids in sequences.items():
        repeated = [i for i, n in Counter(ids).items() if n > 1]
        assert not repeated, f"reader {name} saw {len(repeated)} entries twice, e.g. {repeated[:3]}"
        missing = expected - set(ids)
        assert not missing, f"reader {name} lost {len(missing)} entries, e.g. {sorted(missing)[:3]}"
        assert ids == reference, f"reader {name} saw another order"
    for n in range(WRITERS):  # each writer's entries in the order it wrote them
        assert [i for i in reference if i.startswith(f"w{n}-")] == [f"w{n}-{i}" for i in range(PER_WRITER)]
    layout = SegmentLayout(path)
    active = layout.active()
    assert active is not None and active[0] > 40
    # How much retention removed while the writers ran depends on how far the readers had got at each
    # roll-over (at load 20, 7 of 45 segments): the readers' promise above holds either way. With every
    # reader done, the next roll-over removes what every cursor has passed: all but the last segments.
    during = layout.compacted()
    journal = FileJournal(path, segment_bytes=SEGMENT_BYTES, durability="never", retention="delete")
    filler = "x" * 1000
    n = 0
    while (layout.active() or active)[0] == active[0]:
        await journal.append(ThoughtEntry(id=f"after-{n}", conversation="after", text=filler))
        n += 1
    await journal.aclose()
    compacted = layout.compacted()
    assert compacted is not None and compacted.through > 40, (during, compacted)
