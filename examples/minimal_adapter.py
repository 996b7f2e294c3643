"""A minimal chat adapter: a console that talks to coven-codex through the journal only.

Run: python examples/minimal_adapter.py JOURNAL.jsonl   (with `coven-codex run --journal JOURNAL.jsonl`)
This file is reproduced in docs/journal-protocol.md; a test keeps the two identical.
"""

import asyncio
import sys
from pathlib import Path

from coven_codex.entries import ApprovalEntry, ApprovalRequestEntry, CancelEntry, ThoughtEntry
from coven_codex.journal import BadLine, FileJournal

ROOM, CURSOR = "console", "console-adapter"


async def show(journal: FileJournal) -> None:
    start = await journal.load_cursor(CURSOR)
    if start is None:
        start = await journal.end_position()  # first run: only what comes from now on
    async for item in journal.tail(start):
        if isinstance(item, BadLine):
            print(f"[journal line at {item.start} skipped: {item.reason}]")
        elif item.entry.conversation == ROOM and item.entry.sender == "codex":
            entry = item.entry
            if isinstance(entry, ApprovalRequestEntry):
                print(f"codex asks to {entry.action}: /approve {entry.request_id} or /deny {entry.request_id}")
            elif entry.kind in ("response", "error", "tool_call"):
                print(f"codex [{entry.kind}]> {entry.text}")
        await journal.save_cursor(CURSOR, item.end)  # resume after this item next time


async def main(path: str) -> None:
    journal = FileJournal(Path(path))
    loop = asyncio.get_running_loop()
    async with asyncio.TaskGroup() as group:
        printer = group.create_task(show(journal))
        while line := (await loop.run_in_executor(None, sys.stdin.readline)).strip():
            command, _, argument = line.partition(" ")
            if command == "/stop":
                await journal.append(CancelEntry(conversation=ROOM))
            elif command in ("/approve", "/deny"):
                await journal.append(
                    ApprovalEntry(
                        conversation=ROOM, request_id=argument, decision="approve" if command == "/approve" else "deny"
                    )
                )
            else:
                await journal.append(ThoughtEntry(conversation=ROOM, sender="me", text=line))
        printer.cancel()
    await journal.aclose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
