"""``/project``, ``/model``, ``/mode`` on the console: a typed ``settings`` entry each (who asked, the value), the
daemon's ``settings`` answer shown, and ``/status`` showing the settings it carries."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from pathlib import Path

from coven_codex.adapters.console import ConsoleChat
from coven_codex.entries import ConversationSettings, SettingsEntry, StatusEntry
from coven_codex.journal import FileJournal, JournalRecord


class Keyboard:
    def __init__(self) -> None:
        self.queue: asyncio.Queue[str | None] = asyncio.Queue()

    async def lines(self) -> AsyncIterator[str]:
        while (line := await self.queue.get()) is not None:
            yield line


async def _wait_for(out: io.StringIO, text: str, count: int = 1) -> None:
    async with asyncio.timeout(10):
        while out.getvalue().count(text) < count:
            await asyncio.sleep(0.01)


async def _answer_settings(journal: FileJournal, answers: int) -> list[SettingsEntry]:
    """What the daemon does with ``settings`` entries, as far as the chat sees it: a ``settings`` status each."""
    seen: list[SettingsEntry] = []
    now = ConversationSettings()
    async for item in journal.tail(await journal.end_position()):
        if isinstance(item, JournalRecord) and isinstance(item.entry, SettingsEntry):
            entry = item.entry
            seen.append(entry)
            now = ConversationSettings(
                project=entry.project or now.project, model=entry.model or now.model, mode=entry.mode or now.mode
            )
            await journal.append(StatusEntry(state="settings", settings=now, text=f"now {now}", conversation="c"))
            if len(seen) == answers:
                return seen
    return seen


async def test_settings_commands_append_typed_entries_and_status_shows_the_daemon_s_answer(tmp_path: Path) -> None:
    journal = FileJournal(tmp_path / "j.jsonl")
    out, keys = io.StringIO(), Keyboard()
    await journal.append(StatusEntry(state="turn_started", thread_id="th-1", conversation="c"))
    daemon = asyncio.create_task(_answer_settings(journal, 5))
    task = asyncio.create_task(ConsoleChat(journal, "c", "ann", out).run(keys.lines()))
    await _wait_for(out, "[conversation c")
    await keys.queue.put("/status\n")  # nothing seen yet: the console asks the daemon
    await _wait_for(out, "[settings: now")
    assert "thread: th-1; settings: not seen here yet" in out.getvalue()
    await keys.queue.put("/project api\n")
    await _wait_for(out, "project api sent; the daemon's answer follows")
    await keys.queue.put("/model gpt-5.1-codex\n")
    await keys.queue.put("/mode read-only\n")
    await keys.queue.put("/model\n")
    await _wait_for(out, "asking the daemon for the model and the ones allowed")
    await _wait_for(out, "[settings: now", 5)
    await keys.queue.put("/status\n")
    await _wait_for(out, "project: api; model: gpt-5.1-codex; mode: read-only")
    assert "thread: none yet; project: api" in out.getvalue()  # (the daemon's settings status names no thread)
    await keys.queue.put(None)
    await asyncio.wait_for(task, 10)
    asked = await asyncio.wait_for(daemon, 10)
    assert [(e.sender, e.project, e.model, e.mode) for e in asked] == [
        ("ann", None, None, None),
        ("ann", "api", None, None),
        ("ann", None, "gpt-5.1-codex", None),
        ("ann", None, None, "read-only"),
        ("ann", None, None, None),
    ]
    assert "/project [NAME]" in (await _help(tmp_path))
    await journal.aclose()


async def _help(tmp_path: Path) -> str:
    journal = FileJournal(tmp_path / "h.jsonl")
    out, keys = io.StringIO(), Keyboard()
    task = asyncio.create_task(ConsoleChat(journal, "c", "ann", out).run(keys.lines()))
    await keys.queue.put("/help\n")
    await _wait_for(out, "/mode [NAME]")
    await keys.queue.put(None)
    await asyncio.wait_for(task, 10)
    await journal.aclose()
    return out.getvalue()
