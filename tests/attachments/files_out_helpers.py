"""Shared by the files-out tests: a journal where a conversation has a Codex thread, and a send_file call."""

from __future__ import annotations

from pathlib import Path

from coven_codex.attachments import ThreadHome, file_spells
from coven_codex.entries import FileEntry, StatusEntry, ThoughtEntry
from coven_codex.journal import JournalRecord, MemoryJournal
from coven_codex.mcp.context import SpellContext
from coven_codex.mcp.invoke import call_spell
from coven_codex.mcp.messages import CallToolResult

THREAD = "thread-1"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


async def conversation_journal(cwd: Path, conversation: str = "c") -> MemoryJournal:
    """A journal whose conversation ``conversation`` works in ``cwd`` with the Codex thread :data:`THREAD`."""
    journal = MemoryJournal()
    await journal.append(ThoughtEntry(conversation=conversation, text="hi", cwd=str(cwd)))
    await journal.append(StatusEntry(conversation=conversation, state="session_started", thread_id=THREAD))
    return journal


async def send(
    journal: MemoryJournal,
    folder: Path,
    cwd: Path,
    path: str,
    caption: str = "",
    *,
    max_bytes: int = 1024 * 1024,
    thread: str | None = THREAD,
) -> CallToolResult:
    """Call the built-in ``send_file`` as the MCP server does, from Codex thread ``thread``, on a
    daemon where conversation ``c`` holds :data:`THREAD` and works in ``cwd``."""

    def homes(thread_id: str) -> ThreadHome | None:
        return ThreadHome("c", cwd) if thread_id == THREAD else None

    spell = file_spells(journal, homes=homes, folder=folder, max_bytes=max_bytes).get("send_file")
    assert spell is not None
    meta = {"threadId": thread, "x-codex-turn-metadata": {"turn_id": "turn-1"}} if thread else {}
    return await call_spell(spell, {"path": path, "caption": caption}, SpellContext(spell_name="send_file", meta=meta))


async def file_entries(journal: MemoryJournal) -> list[FileEntry]:
    return [
        item.entry
        for item in await journal.read()
        if isinstance(item, JournalRecord) and isinstance(item.entry, FileEntry)
    ]
