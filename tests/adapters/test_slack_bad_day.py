"""The Slack adapter when Slack has a bad day: 5xx, refusals, a channel's long 429, large and strangers' files.

Every test runs the real ``coven-codex slack`` process (slack_sdk, slack_bolt) against the fake
Slack (``slack_fake.py``) answering badly on purpose (``bad_day.py``).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from bad_day import HTML_502, Fault
from running import append, running
from slack_fake import text_of
from slack_under_test import SlackAdapter

from coven_codex.entries import ResponseEntry, ThoughtEntry
from coven_codex.journal import FileJournal, JournalRecord


@pytest.fixture
async def slack(tmp_path: Path) -> AsyncIterator[SlackAdapter]:
    async with running(SlackAdapter(tmp_path, extra_config='allow_channels = ["CGENERAL", "CRANDOM"]\n')) as adapter:
        yield adapter


async def _thoughts(path: Path) -> list[ThoughtEntry]:
    journal = FileJournal(path)
    try:
        return [
            i.entry for i in await journal.read() if isinstance(i, JournalRecord) and isinstance(i.entry, ThoughtEntry)
        ]
    finally:
        await journal.aclose()


async def _until_thought(adapter: SlackAdapter, text: str, timeout: float = 20) -> ThoughtEntry:
    async with asyncio.timeout(timeout):
        while True:
            found = [t for t in await _thoughts(adapter.journal) if t.text == text]
            if found:
                return found[0]
            await asyncio.sleep(0.05)


def _count(adapter: SlackAdapter, text: str) -> int:
    return sum(text in text_of(m) for m in adapter.fake.bot_messages())


async def test_a_5xx_on_a_post_is_retried_and_the_reply_shown_once(slack: SlackAdapter) -> None:
    slack.fake.faults.add(
        Fault(status=500, body={"ok": False, "error": "internal_error"}, route="chat.postMessage", text="first reply"),
        Fault(status=502, body=HTML_502, route="chat.postMessage", text="first reply"),
        Fault(status=503, body="", route="chat.postMessage", text="first reply", cut="after"),
    )
    conversation = slack.conversation("general", "ann")
    await append(
        slack.journal,
        ResponseEntry(text="first reply.", conversation=conversation),
        ResponseEntry(text="second reply.", conversation=conversation),
    )
    await slack.fake.wait_for(lambda: _count(slack, "second reply.") == 1, timeout=30)
    assert _count(slack, "first reply.") == 1  # retried until shown, found (not posted again) after the cut
    assert [f.hits for f in slack.fake.faults.active] == [1, 1, 1]
    assert slack.alive()
    log = slack.stderr.read_text()
    assert "refused to show" not in log and "trying again" in log


async def test_a_refusal_that_cannot_be_posted_to_a_stranger_does_not_stop_the_adapter(slack: SlackAdapter) -> None:
    slack.fake.faults.add(
        Fault(status=200, body={"ok": False, "error": "is_archived"}, route="chat.postMessage", channel="CRANDOM")
    )
    await slack.fake.mention("CRANDOM", "USTRANGER", "let me in", slack.roots["random"])
    await slack.fake.wait_for(lambda: slack.fake.faults.active[0].hits == 1)
    await slack.fake.mention("CGENERAL", "UANN", "still there?", slack.roots["general"])
    thought = await _until_thought(slack, "still there?")
    await append(slack.journal, ResponseEntry(text="yes, still here.", conversation=thought.conversation))
    await slack.fake.wait_for(lambda: _count(slack, "yes, still here.") == 1)
    assert slack.alive()
    log = slack.stderr.read_text()
    assert log.count("is_archived") == 1 and "Traceback" not in log


async def _latency(adapter: SlackAdapter, conversation: str, text: str) -> float:
    began = time.monotonic()
    await append(adapter.journal, ResponseEntry(text=text, conversation=conversation))
    await adapter.fake.wait_for(lambda: _count(adapter, text) == 1, timeout=60)
    return time.monotonic() - began


async def test_a_channel_s_long_rate_limit_does_not_delay_another_channel(slack: SlackAdapter) -> None:
    slack.fake.faults.add(
        Fault(
            status=429,
            body={"ok": False, "error": "ratelimited"},
            headers={"Retry-After": "20"},
            route="chat.postMessage",
            channel="CRANDOM",
        )
    )
    await append(slack.journal, ResponseEntry(text="held reply.", conversation=slack.conversation("random", "ann")))
    await slack.fake.wait_for(lambda: slack.fake.faults.active[0].hits == 1)
    other = await _latency(slack, slack.conversation("general", "ann"), "unrelated reply.")
    assert other < 5.0, other  # was 19.5 s: one egress loop for all
    assert _count(slack, "held reply.") == 0  # still waiting its 20 s out


async def test_a_120_s_rate_limit_leaves_another_channel_s_latency_as_it_was(slack: SlackAdapter) -> None:
    general = slack.conversation("general", "ann")
    before = sorted([await _latency(slack, general, f"calm reply {n}.") for n in range(7)])
    slack.fake.faults.add(
        Fault(
            status=429,
            body={"ok": False, "error": "ratelimited"},
            headers={"Retry-After": "120"},
            route="chat.postMessage",
            channel="CRANDOM",
            times=None,
        )
    )
    await append(slack.journal, ResponseEntry(text="held for 120 s.", conversation=slack.conversation("random", "ann")))
    await slack.fake.wait_for(lambda: slack.fake.faults.active[0].hits == 1)
    during = sorted([await _latency(slack, general, f"busy reply {n}.") for n in range(7)])
    p50_before, p50_during = before[3], during[3]
    print(f"post latency p50 without the limit {p50_before:.3f} s, with channel CRANDOM held 120 s {p50_during:.3f} s")
    assert p50_during < p50_before + 0.5, (before, during)


def _png(size: int) -> bytes:
    head = b"\x89PNG\r\n\x1a\n"
    return head + os.urandom(size - len(head))


async def test_an_allowed_user_s_5_mib_image_is_stored_whole(slack: SlackAdapter) -> None:
    data = _png(5 * 1024 * 1024)
    shared = slack.fake.add_file(data, "image/png", "big.png")
    await slack.fake.mention("CGENERAL", "UANN", "look at this", slack.roots["general"], [shared])
    thought = await _until_thought(slack, "look at this", timeout=40)
    assert len(thought.attachments) == 1
    stored = Path(thought.attachments[0].url.removeprefix("file://")).read_bytes()
    assert len(stored) == len(data) and hashlib.sha256(stored).digest() == hashlib.sha256(data).digest()


async def test_a_stranger_s_images_are_never_downloaded(slack: SlackAdapter) -> None:
    files = [slack.fake.add_file(_png(2048), "image/png", f"s{n}.png") for n in range(3)]
    await slack.fake.mention("CGENERAL", "USTRANGER", "three pictures", slack.roots["general"], files)
    await slack.fake.wait_for(lambda: _count(slack, "not allowed") == 1)
    assert slack.fake.fetched == {}
    assert not any(t.text == "three pictures" for t in await _thoughts(slack.journal))
