"""A journal reader run as its own process by test_segments_load.py, killed with SIGKILL at random.

``python segment_reader_process.py JOURNAL NAME OUTPUT STOPS``: tails JOURNAL and writes
``<id>\\t<end position>`` for each entry to OUTPUT (its own record of what it handled, flushed per
line), saving its cursor NAME every few entries (retention removes only what every cursor passed).
After a kill it resumes after the last complete line of OUTPUT, or from its cursor when OUTPUT is
empty. It exits once it has seen STOPS entries whose text is ``stop``.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from coven_codex.journal import START, FileJournal, JournalRecord, Position

SAVE_EVERY = 250


def resume_point(output: Path) -> tuple[Position | None, int]:
    """Where the last complete line of ``output`` ends in the journal (None: no line), and stops seen."""
    if not output.exists():
        return None, 0
    data = output.read_bytes()
    complete = data[: data.rfind(b"\n") + 1]
    if len(complete) != len(data):
        with output.open("r+b") as file:  # a line torn by the kill: cut it off
            file.truncate(len(complete))
    lines = complete.decode().splitlines()
    if not lines:
        return None, 0
    stops = sum(1 for line in lines if line.startswith("stop-"))
    return Position.parse(lines[-1].split("\t")[1]), stops


async def main(path: str, name: str, output_name: str, stops_wanted: int) -> None:
    output = Path(output_name)
    journal = FileJournal(Path(path))
    start, stops = resume_point(output)
    if stops == stops_wanted:  # killed after it had handled the last stop: nothing more will come
        return
    if start is None:
        start = await journal.load_cursor(name)
        if start is None:
            start = START
            await journal.save_cursor(name, START)
    fd = os.open(output, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    count = 0
    try:
        async for item in journal.tail(start):
            assert isinstance(item, JournalRecord), item
            os.write(fd, f"{item.entry.id}\t{item.end}\n".encode())
            count += 1
            if item.entry.text == "stop":
                stops += 1
            if count % SAVE_EVERY == 0 or stops == stops_wanted:
                await journal.save_cursor(name, item.end)
            if stops == stops_wanted:
                break
    finally:
        os.close(fd)
        await journal.aclose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
