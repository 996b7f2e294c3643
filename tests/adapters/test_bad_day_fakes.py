"""The wire-level fakes themselves on a bad day (``bad_day.py``): a slow answer never holds up a fake's stop."""

from __future__ import annotations

import asyncio
import time

import aiohttp
from bad_day import Fault
from discord_fake import CHANNEL_ID, FakeDiscord, serve
from slack_fake import BOT_TOKEN, FakeSlack

STOP_BOUND = 10.0
"""A fake's stop with a slow answer pending: aiohttp alone would wait out the answer's 60 s."""


async def _ask_and_give_up(url: str, *, data: dict[str, str] | None = None, token: str = "") -> None:
    """Send one request and leave before its answer comes (a bot killed while it waited)."""
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"} if token else None) as session:
        try:
            async with session.post(url, data=data, timeout=aiohttp.ClientTimeout(total=0.5)) as response:
                raise AssertionError(f"the slow answer came at once: {response.status}")
        except TimeoutError:
            pass


async def test_the_discord_fake_stops_at_once_while_a_60_s_answer_is_pending() -> None:
    fake = FakeDiscord()
    slow = Fault(status=500, route=f"POST /api/v10/channels/{CHANNEL_ID}/messages", delay=60, times=None)
    fake.faults.add(slow)
    began = 0.0
    async with serve(fake) as port:
        await _ask_and_give_up(f"http://127.0.0.1:{port}/api/v10/channels/{CHANNEL_ID}/messages")
        assert slow.hits == 1
        began = time.monotonic()
    assert time.monotonic() - began < STOP_BOUND


async def test_the_slack_fake_stops_at_once_while_a_60_s_answer_is_pending() -> None:
    fake = FakeSlack()
    slow = Fault(status=500, route="chat.postMessage", delay=60, times=None)
    fake.faults.add(slow)
    api = await fake.start()
    try:
        await _ask_and_give_up(f"{api}chat.postMessage", data={"channel": "CGENERAL", "text": "hi"}, token=BOT_TOKEN)
        assert slow.hits == 1
    finally:
        began = time.monotonic()
        await asyncio.wait_for(fake.stop(), 70)
    assert time.monotonic() - began < STOP_BOUND
