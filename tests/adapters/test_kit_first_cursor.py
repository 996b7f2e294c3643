"""An adapter that starts at the journal's end saves that cursor at once: a restart resumes there."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from coven_codex.adapters.kit.access import AccessPolicy
from coven_codex.adapters.kit.ledger import DeliveryLedger
from coven_codex.adapters.kit.mapping import NamedMap
from coven_codex.adapters.kit.platform import Address, Capabilities, Incoming, Outgoing
from coven_codex.adapters.kit.render import Dialect, PlainDialect
from coven_codex.adapters.kit.runner import AdapterRunner
from coven_codex.entries import ResponseEntry
from coven_codex.journal import FileJournal


class ListPlatform:
    """Records posts in a list; its incoming stream ends when ``done`` is set."""

    name = "list"
    dialect: Dialect = PlainDialect()
    capabilities = Capabilities(can_find=False)

    def __init__(self) -> None:
        self.posts: list[str] = []
        self.done = asyncio.Event()

    async def post(self, address: Address, message: Outgoing, key: str | None) -> str:
        self.posts.append(message.text)
        return str(len(self.posts))

    async def edit(self, address: Address, message_id: str, message: Outgoing) -> None:
        self.posts[int(message_id) - 1] = message.text

    async def delete(self, address: Address, message_id: str) -> None:
        return None

    async def typing(self, address: Address, active: bool) -> None:
        return None

    async def find(self, address: Address, key: str) -> str | None:
        return None

    async def incoming(self) -> AsyncIterator[Incoming]:
        await self.done.wait()
        return
        yield


async def _run_until(journal: FileJournal, platform: ListPlatform, text: str | None) -> None:
    runner = AdapterRunner(
        journal, platform, NamedMap({"c1"}), AccessPolicy.everyone(), DeliveryLedger.memory(), name="first"
    )
    task = asyncio.create_task(runner.run())
    async with asyncio.timeout(10):
        await runner.ready.wait()
        while text is not None and not any(text in post for post in platform.posts):
            await asyncio.sleep(0.02)
    platform.done.set()
    await task


async def test_entries_appended_while_a_new_adapter_was_down_are_shown_after_its_restart(tmp_path: Path) -> None:
    journal = FileJournal(tmp_path / "journal.jsonl")
    try:
        await journal.append(ResponseEntry(text="before the adapter existed", conversation="c1"))
        first = ListPlatform()
        await _run_until(journal, first, None)  # started at the end, stopped before any new entry
        await journal.append(ResponseEntry(text="while the adapter was down", conversation="c1"))
        second = ListPlatform()
        await _run_until(journal, second, "while the adapter was down")
        assert not any("before the adapter existed" in post for post in first.posts + second.posts)
    finally:
        await journal.aclose()
