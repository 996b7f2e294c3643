"""The kill -9 crash loop of test_crash.py on a journal that rolls over all the time (issue 18 item 3).

The daemon (real Codex 0.169.0, the scripted model) and the test's writer both append with
4 KiB segments, so thoughts, replies and the daemon's cursors straddle dozens of roll-overs while
the daemon is killed with SIGKILL at random: every thought still reaches Codex exactly once and
every rollout entry reaches the journal exactly once (the checks of ``crash_loop``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from agent_harness import AgentHarness, replies
from test_crash import crash_loop

from coven_codex.journal import START, FileJournal
from coven_codex.journal.segments import Retention, SegmentLayout
from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.responders import echo_responder

pytestmark = [pytest.mark.codex]

Factory = Callable[[Path, ScriptedModelServer], AgentHarness]
SEGMENT_BYTES = 4096


BUSY_ROUNDS_MAX = 24
"""Busy thoughts at most before idle's segment must have been removed (about 4 make a segment)."""
READER = "test-reader"
"""The test's own cursor (see test_a_restart_after_retention_removed_an_idle_conversations_segments)."""


async def segmented(h: AgentHarness, retention: Retention = "keep") -> None:
    """Make the harness's writer and its daemons roll the journal over every ``SEGMENT_BYTES``,
    applying ``retention`` after each roll-over they make."""
    await h.journal.aclose()
    h.journal = FileJournal(h.journal_path, durability="never", segment_bytes=SEGMENT_BYTES, retention=retention)
    h.extra_args = [*h.extra_args, "--journal-segment-bytes", str(SEGMENT_BYTES), "--journal-retention", retention]


async def test_kill9_daemon_across_roll_overs(codex_bin_169: Path, harness_factory: Factory) -> None:
    async with ScriptedModelServer(responder=echo_responder) as server:
        h = harness_factory(codex_bin_169, server)
        await segmented(h)
        await crash_loop(h, server, thoughts=30, kills=5, seed=18)
        assert len(SegmentLayout(h.journal_path).sealed_numbers()) >= 10


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_kill9_daemon_across_roll_overs_200_thoughts_25_kills(
    codex_bin_169: Path, harness_factory: Factory
) -> None:
    async with ScriptedModelServer(responder=echo_responder) as server:
        h = harness_factory(codex_bin_169, server)
        await segmented(h)
        await crash_loop(h, server, thoughts=200, kills=25, seed=1803)
        assert len(SegmentLayout(h.journal_path).sealed_numbers()) >= 50


async def test_a_restart_after_retention_removed_an_idle_conversations_segments(
    codex_bin_169: Path, harness_factory: Factory
) -> None:
    """Retention deletes the segments an idle conversation last wrote in; the daemon still restarts
    (its start-up read of its own entries begins at the oldest segment kept) and answers it once."""
    async with ScriptedModelServer(responder=echo_responder) as server:
        h = harness_factory(codex_bin_169, server)
        # Both writers apply retention after the roll-overs they make: which of them crosses a
        # segment's end is the machine's timing (the daemon's replies or the test's thoughts; with
        # only the daemon deleting, a loaded run where the test's thoughts made every late roll-over
        # removed nothing).
        await segmented(h, retention="delete")
        # The test reads like any adapter, with a cursor of its own that it moves past what it has
        # seen: retention removes only what every cursor passed, so a reply is not deleted before
        # the test has read it (without it, a loaded machine lost 'echo: busy 6' that way).
        await h.journal.save_cursor(READER, START)
        daemon = await h.start()
        await h.think("idle", "first")
        await h.wait_for(lambda es: "echo: first" in replies(es, "idle"), timeout=120, what="idle's reply")
        first = next(item for item in await h.journal.read() if getattr(item.entry, "text", "") == "echo: first")

        def idle_segment_removed() -> bool:
            compacted = SegmentLayout(h.journal_path).compacted()
            return compacted is not None and compacted.through >= first.start.major

        rounds = 0
        while rounds < 8 or not idle_segment_removed():  # (a roll-over after the cursor passed it)
            assert rounds < BUSY_ROUNDS_MAX, f"idle's segment was not removed after {rounds} busy thoughts"
            n, rounds = rounds, rounds + 1
            await h.think("busy", f"busy {n}")
            await h.wait_for(lambda es, n=n: f"echo: busy {n}" in replies(es, "busy"), timeout=120, what="busy")
            seen = [item for item in await h.journal.read() if getattr(item.entry, "text", "") == f"echo: busy {n}"]
            await h.journal.save_cursor(READER, seen[-1].start)
        assert await h.stop(daemon) == 0
        daemon = await h.start()
        await h.think("idle", "second")
        await h.wait_for(lambda es: "echo: second" in replies(es, "idle"), timeout=120, what="idle's second reply")
        assert await h.stop(daemon) == 0
        entries = await h.entries()
        assert replies(entries, "idle") == ["echo: second"]  # the first lies in a removed segment
        assert sum(1 for e in entries if e.kind == "thought" and e.conversation == "idle") == 1
        assert sum(1 for r in replies(entries, "busy") if r.startswith("echo: busy")) <= rounds
