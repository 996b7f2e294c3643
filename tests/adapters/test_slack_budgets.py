"""Budgets: the real ``coven-codex slack`` process stays within Slack's documented limits, enforced by the fake.

- Five replies streamed at once against Tier 3 (50 calls a minute per workspace) for
  ``chat.update``; the adapter's edit interval is 0.2 s, so without a shared budget five streams
  would call it 25 times a second.
- Bursts of replies from several conversations against ``chat.postMessage``'s "special" limit
  (about one message a second per channel, short bursts allowed): the conversations sharing a
  channel share its budget; another channel's replies are not held by it.
"""

from __future__ import annotations

import asyncio
import time
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


async def test_bursts_from_several_conversations_keep_to_chat_post_message_s_rate_per_channel(tmp_path: Path) -> None:
    adapter = SlackAdapter(tmp_path, post_rate=1.0)  # Slack's documented rate, the adapter's default
    adapter.fake.per_channel["chat.postMessage"] = (3, 1.0)  # one a second per channel, bursts of 3
    await adapter.start()
    roots = [str(adapter.fake.user_message("CGENERAL", "UANN", f"thread {n}")["ts"]) for n in range(3)]
    general = [f"slack:{TEAM}/CGENERAL/{root}" for root in roots]
    random = adapter.conversation("random", "ann")
    journal = FileJournal(adapter.journal, durability="never")
    began = time.monotonic()
    random_done = 0.0
    try:
        for n in range(4):
            for c, conversation in enumerate([*general, random]):
                await journal.append(ResponseEntry(text=f"burst {c}.{n} shown.", conversation=conversation))

        def shown(conversations: range) -> bool:
            screen = [text_of(m) for m in adapter.fake.bot_messages()]
            return all(sum(f"burst {c}.{n} shown." in t for t in screen) == 1 for c in conversations for n in range(4))

        await adapter.fake.wait_for(lambda: shown(range(3, 4)), timeout=60)
        random_done = time.monotonic() - began
        await adapter.fake.wait_for(lambda: shown(range(4)), timeout=60)
    finally:
        await journal.aclose()
        await adapter.close()
    took = time.monotonic() - began
    limited = adapter.fake.tier_limited
    print(f"16 posts (12 in one channel) in {took:.1f} s, CRANDOM's 4 in {random_done:.1f} s; 429s {limited}")
    assert adapter.fake.tier_limited == 0 and adapter.fake.limited == 0
    assert took >= 8.0  # 12 posts in one channel: a burst, then about one a second
    assert random_done < took - 4.0  # the other channel's replies were not held by CGENERAL's budget
