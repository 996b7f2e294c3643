"""The Discord adapter when Discord has a bad day: 5xx past discord.py's retries, 400s, 403s, a route's
long 429, attachments elsewhere or larger than they say.

Every test runs the real ``coven-codex discord`` process (discord.py) against the fake Discord
(``discord_fake.py``) answering badly on purpose (``bad_day.py``).
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from bad_day import HTML_502, Fault
from discord_fake import CHANNEL_ID, GUILD_ID, journal_entries, until
from discord_under_test import USERS, DiscordAdapter
from running import append, running

from coven_codex.entries import ResponseEntry

CONVERSATION = f"discord:{GUILD_ID}/{CHANNEL_ID}/"
POSTS = f"POST /api/v10/channels/{CHANNEL_ID}/messages"


@pytest.fixture
async def discord(tmp_path: Path) -> AsyncIterator[DiscordAdapter]:
    async with running(DiscordAdapter(tmp_path)) as adapter:
        yield adapter


def _count(adapter: DiscordAdapter, text: str, channel: str = CHANNEL_ID) -> int:
    return sum(text in m.content for m in adapter.fake.in_channel(channel))


async def test_5xx_past_discord_py_s_retries_are_retried_and_the_reply_shown_once(discord: DiscordAdapter) -> None:
    discord.fake.faults.add(
        Fault(status=503, body={"message": "Service Unavailable", "code": 0}, route=POSTS, text="first reply"),
        Fault(status=503, body=HTML_502, route=POSTS, text="first reply"),
        Fault(status=503, route=POSTS, text="first reply", cut="after"),
    )
    await append(
        discord.journal,
        ResponseEntry(text="first reply.", conversation=CONVERSATION),
        ResponseEntry(text="second reply.", conversation=CONVERSATION),
    )
    await until(lambda: _count(discord, "second reply.") == 1, 30)
    assert _count(discord, "first reply.") == 1
    assert [f.hits for f in discord.fake.faults.active] == [1, 1, 1]
    assert discord.alive()


async def test_a_400_on_one_reply_is_one_notice_and_never_a_crash_loop(discord: DiscordAdapter) -> None:
    discord.fake.faults.add(
        Fault(
            status=400,
            body={"message": "Invalid Form Body", "code": 50035, "errors": {"content": {}}},
            route=POSTS,
            text="BADFORM",
            times=None,
        )
    )
    await append(
        discord.journal,
        ResponseEntry(text="a BADFORM reply.", conversation=CONVERSATION),
        ResponseEntry(text="the next reply.", conversation=CONVERSATION),
    )
    await until(lambda: _count(discord, "the next reply.") == 1)
    await discord.stop()
    await discord.start()  # a restart neither stops on it again nor repeats the notice
    await append(discord.journal, ResponseEntry(text="after the restart.", conversation=CONVERSATION))
    await until(lambda: _count(discord, "after the restart.") == 1)
    notices = [m.content for m in discord.fake.in_channel(CHANNEL_ID) if "refused to show a message" in m.content]
    assert len(notices) == 1 and "50035" in notices[0]
    assert discord.alive()


async def test_a_stranger_where_the_bot_cannot_post_does_not_stop_it(discord: DiscordAdapter) -> None:
    forbidden = Fault(status=403, body={"message": "Missing Permissions", "code": 50013}, route=POSTS, times=None)
    discord.fake.faults.add(forbidden)
    await discord.say("general", "stranger", "let me in")
    await until(lambda: forbidden.hits >= 1)
    discord.fake.faults.clear()
    await discord.say("general", "ann", "still there?")
    await until(lambda: [t["text"] for t in journal_entries(discord.journal, "thought")] == ["still there?"])
    await append(discord.journal, ResponseEntry(text="yes, still here.", conversation=CONVERSATION))
    await until(lambda: _count(discord, "yes, still here.") == 1)
    assert discord.alive()
    assert "Missing Permissions" in discord.stderr.read_text()


async def test_a_route_s_12_s_rate_limit_does_not_delay_another_conversation(discord: DiscordAdapter) -> None:
    thread = "2000000000000000777"
    limited = Fault(
        status=429,
        body={"message": "You are being rate limited.", "retry_after": 12.0, "global": False},
        headers={"Retry-After": "12", "X-RateLimit-Bucket": "thread", "X-RateLimit-Scope": "user"},
        route=f"POST /api/v10/channels/{thread}/messages",
    )
    discord.fake.faults.add(limited)
    await append(discord.journal, ResponseEntry(text="held reply.", conversation=f"{CONVERSATION}{thread}"))
    await until(lambda: limited.hits == 1)
    began = time.monotonic()
    await append(discord.journal, ResponseEntry(text="unrelated reply.", conversation=CONVERSATION))
    await until(lambda: _count(discord, "unrelated reply.") == 1)
    assert time.monotonic() - began < 5.0  # was 11.5 s: one egress loop for all
    assert _count(discord, "held reply.", thread) == 0


async def _latency(adapter: DiscordAdapter, text: str) -> float:
    began = time.monotonic()
    await append(adapter.journal, ResponseEntry(text=text, conversation=CONVERSATION))
    await until(lambda: _count(adapter, text) == 1, 60)
    return time.monotonic() - began


async def test_a_120_s_rate_limit_leaves_another_conversation_s_latency_as_it_was(discord: DiscordAdapter) -> None:
    before = sorted([await _latency(discord, f"calm reply {n}.") for n in range(7)])
    thread = "2000000000000000778"
    limited = Fault(
        status=429,
        body={"message": "You are being rate limited.", "retry_after": 120.0, "global": False},
        headers={"Retry-After": "120", "X-RateLimit-Bucket": "thread", "X-RateLimit-Scope": "user"},
        route=f"POST /api/v10/channels/{thread}/messages",
        times=None,
    )
    discord.fake.faults.add(limited)
    await append(discord.journal, ResponseEntry(text="held for 120 s.", conversation=f"{CONVERSATION}{thread}"))
    await until(lambda: limited.hits == 1)
    during = sorted([await _latency(discord, f"busy reply {n}.") for n in range(7)])
    p50_before, p50_during = before[3], during[3]
    print(f"post latency p50 without the limit {p50_before:.3f} s, with a thread held 120 s {p50_during:.3f} s")
    assert p50_during < p50_before + 0.5, (before, during)
    assert _count(discord, "held for 120 s.", thread) == 0 and limited.hits == 1  # waiting its 120 s out


def _png(size: int) -> bytes:
    head = b"\x89PNG\r\n\x1a\n"
    return head + os.urandom(size - len(head))


async def test_an_attachment_on_another_host_is_not_fetched(discord: DiscordAdapter) -> None:
    elsewhere = discord.fake.attachment(f"http://localhost:{discord._port}", "elsewhere.png", _png(4096))
    message = discord.fake.user_message(USERS["ann"], "look", attachments=(elsewhere,))
    await discord.fake.dispatch("MESSAGE_CREATE", message)
    await until(lambda: [t["text"] for t in journal_entries(discord.journal, "thought")] == ["look"])
    assert discord.fake.fetched["elsewhere.png"] == 0
    assert journal_entries(discord.journal, "thought")[0]["attachments"] == []
    await until(lambda: _count(discord, "not on the platform's own hosts") == 1)


async def test_a_small_attachment_that_is_60_mb_is_not_read_whole(discord: DiscordAdapter) -> None:
    discord.fake.declared["huge.png"] = 1024
    huge = discord.fake.attachment(f"http://127.0.0.1:{discord._port}", "huge.png", _png(60 * 1024 * 1024))
    await discord.fake.dispatch("MESSAGE_CREATE", discord.fake.user_message(USERS["ann"], "huge", attachments=(huge,)))
    await until(lambda: [t["text"] for t in journal_entries(discord.journal, "thought")] == ["huge"], 60)
    assert journal_entries(discord.journal, "thought")[0]["attachments"] == []
    await until(lambda: _count(discord, "larger than 10 MiB") == 1)
    assert discord.fake.sent["huge.png"] < 30 * 1024 * 1024, discord.fake.sent


async def test_a_restart_after_the_nonce_window_posts_nothing_twice(discord: DiscordAdapter) -> None:
    answer_lost = Fault(status=500, route=POSTS, text="across the window", cut="after")
    slow_look_up = Fault(status=500, route=f"GET /api/v10/channels/{CHANNEL_ID}/messages", delay=60, times=None)
    discord.fake.faults.add(answer_lost, slow_look_up)
    await append(discord.journal, ResponseEntry(text="a reply across the window.", conversation=CONVERSATION))
    await until(lambda: answer_lost.hits == 1 and slow_look_up.hits == 1)  # posted; the bot never heard so
    await discord.kill()
    discord.fake.faults.clear()
    discord.fake.clock += 600  # ten minutes on: Discord no longer returns (nor dedups by) the nonce
    await discord.start()
    await append(discord.journal, ResponseEntry(text="a marker after.", conversation=CONVERSATION))
    await until(lambda: _count(discord, "a marker after.") == 1)
    assert _count(discord, "a reply across the window.") == 1
