"""Budgets: five replies streamed at once stay within the rate limits the fake Discord announces and enforces.

The real ``coven-codex discord`` process runs against the fake Discord answering every request
with its bucket's ``X-RateLimit-*`` headers and enforcing them (``discord_fake.py``) at the limits
commonly seen from Discord: 5 posts and 5 edits per 5 s per channel, 50 requests a second in all.
Each stream is edited once a second (``edit_interval``), fed a piece every 0.2 s: its channel's
bucket runs out, and discord.py's buckets, fed by the headers, make the next edit wait instead
of being answered 429.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
from discord_fake import CHANNEL_ID, GUILD_ID, OBSERVED_LIMITS, TEST_TOKEN, FakeDiscord, serve, until
from discord_under_test import DiscordAdapter

from coven_codex.entries import DeltaEntry, ResponseEntry
from coven_codex.journal import FileJournal

THREADS = ["", "2000000000000000201", "2000000000000000202", "2000000000000000203", "2000000000000000204"]
"""The five conversations: the channel itself and four threads in it (each a channel of its own)."""


async def test_five_streams_at_once_never_exceed_discord_s_announced_buckets(tmp_path: Path) -> None:
    adapter = DiscordAdapter(tmp_path)
    adapter.fake.route_limits.update(OBSERVED_LIMITS)
    await adapter.start()
    conversations = [f"discord:{GUILD_ID}/{CHANNEL_ID}/{thread}" for thread in THREADS]
    journal = FileJournal(adapter.journal, durability="never")

    def shown(n: int, text: str) -> int:
        return sum(text in m.content for m in adapter.fake.in_channel(THREADS[n] or CHANNEL_ID))

    try:
        for step in range(60):
            for n, conversation in enumerate(conversations):
                await journal.append(DeltaEntry(text=f"s{n}w{step:02} ", item_id=f"i{n}", conversation=conversation))
            await asyncio.sleep(0.2)
        for n, conversation in enumerate(conversations):
            text = "".join(f"s{n}w{step:02} " for step in range(60)) + "end."
            await journal.append(ResponseEntry(text=text, conversation=conversation))
        await until(lambda: all(shown(n, f"s{n}w59 end.") == 1 for n in range(5)), 120)
        assert adapter.alive()
    finally:
        await journal.aclose()
        await adapter.stop()
    edits = sum(m.edits for m in adapter.fake.messages.values())
    emptied = adapter.fake.emptied.get("PATCH /channels/{cid}/messages/{mid}", 0)
    limited = adapter.fake.limited_by_bucket
    print(f"{edits} edits for 5 streams in about 12 s; buckets used up {emptied} times; 429s {limited}")
    assert adapter.fake.limited_by_bucket == 0
    assert emptied >= 5  # the edit buckets ran out: the limit bound, and was waited out
    assert all(shown(n, f"s{n}w00 ") == 1 for n in range(5))  # one message per stream
    assert edits >= 25  # the streams were edited, as often as the buckets allowed


async def test_the_fake_announces_its_buckets_and_answers_429_past_them() -> None:
    """What the budget test relies on: a client that ignores the headers is refused on its sixth post."""
    fake = FakeDiscord(token=TEST_TOKEN, route_limits=dict(OBSERVED_LIMITS))
    async with serve(fake) as port, aiohttp.ClientSession() as session:
        url = f"http://127.0.0.1:{port}/api/v10/channels/{CHANNEL_ID}/messages"
        answers = []
        for n in range(6):
            async with session.post(url, json={"content": f"post {n}"}) as answer:
                answers.append((answer.status, dict(answer.headers), await answer.json()))
        async with session.post(url.replace(CHANNEL_ID, "2000000000000000999"), json={"content": "x"}) as other:
            assert other.status == 200  # another channel has a bucket of its own
    assert [status for status, _, _ in answers] == [200] * 5 + [429]
    assert [h["X-RateLimit-Remaining"] for _, h, _ in answers[:5]] == ["4", "3", "2", "1", "0"]
    assert len({h["X-RateLimit-Bucket"] for _, h, _ in answers}) == 1
    assert all(h["X-RateLimit-Limit"] == "5" and 0 < float(h["X-RateLimit-Reset-After"]) <= 5 for _, h, _ in answers)
    _, headers, body = answers[5]
    assert headers["X-RateLimit-Scope"] == "user" and body["global"] is False and 0 < body["retry_after"] <= 5
    assert fake.limited_by_bucket == 1 and len(fake.in_channel(CHANNEL_ID)) == 5
