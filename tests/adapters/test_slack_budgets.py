"""Budgets: five replies streamed at once stay within Slack's documented tier for ``chat.update``.

The real ``coven-codex slack`` process runs against the fake Slack enforcing Tier 3 (50 calls a
minute per workspace) for ``chat.update``; the adapter's edit interval is 0.2 s, so without a
shared budget five streams would call it 25 times a second.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from slack_fake import TEAM, text_of
from slack_under_test import SlackAdapter

from coven_codex.entries import DeltaEntry, ResponseEntry
from coven_codex.journal import FileJournal


async def test_five_streams_at_once_never_exceed_chat_update_s_tier(tmp_path: Path) -> None:
    adapter = SlackAdapter(tmp_path)
    adapter.fake.tiers["chat.update"] = 50
    await adapter.start()
    conversations = [f"slack:{TEAM}/CGENERAL/1800000000.00000{n}" for n in range(5)]
    journal = FileJournal(adapter.journal, durability="never")
    try:
        for step in range(60):
            for n, conversation in enumerate(conversations):
                await journal.append(DeltaEntry(text=f"s{n}w{step:02} ", item_id=f"i{n}", conversation=conversation))
            await asyncio.sleep(0.2)
        for n, conversation in enumerate(conversations):
            text = "".join(f"s{n}w{step:02} " for step in range(60)) + "end."
            await journal.append(ResponseEntry(text=text, conversation=conversation))

        def done() -> bool:
            screen = [text_of(m) for m in adapter.fake.bot_messages()]
            return all(sum(f"s{n}w59 end." in t for t in screen) == 1 for n in range(5))

        await adapter.fake.wait_for(done, timeout=120)
    finally:
        await journal.aclose()
        await adapter.close()
    updates = [op for op in adapter.fake.operations if op["op"] == "update"]
    print(f"{len(updates)} chat.update calls for 5 streams in about 12 s; 429s {adapter.fake.tier_limited}")
    assert adapter.fake.tier_limited == 0 and adapter.fake.limited == 0
    assert len([op for op in adapter.fake.operations if op["op"] == "post"]) == 5
    assert len(updates) >= 10  # the streams were edited, as often as the budget allowed
