"""Egress: one session's rollout file → chat entries → the journal, exactly once.

The rollout is tailed from byte 0. Lines before the saved ``egress_offset`` are only fed to the
translator (so it rebuilds the state it keeps between lines, e.g. which reply was already
seen); their entries were written before. From the saved offset on, each line's entries are
appended to the journal and only then is the offset advanced past the line.

Ordering and ids give exactly-once:

- the journal append comes before the offset save, so a crash can only make us *repeat* a line;
- entry ids are deterministic (``<thread>:<line start>:<index>``; a turn's error and end:
  ``<thread>:turn-<turn>:error|end``), and at start-up the daemon collects the ids already in
  the journal after the session's ``replay_from`` (each line is written inside the session's
  :class:`~coven_codex.agent.replay.ReplayWindow`, which keeps that position at or before every
  entry a restart may produce again); entries are appended through the daemon's
  :class:`~coven_codex.agent.writer.DaemonWriter`, so a repeated entry, or one the session
  already wrote from the driver's report, finds its id there and is dropped.

Offsets are saved by the session's coalescing saver, not once per line: a lagging saved offset
only makes the restart re-read (and drop) a few more lines.

An image Codex generated (the translator's :class:`~coven_codex.rollout.GeneratedImage`) becomes,
through ``send_image``, one more entry of its line (a ``file`` entry, or the ``error`` refusing it;
:mod:`coven_codex.attachments.generated`); lines before the saved offset are not decoded again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from coven_codex.agent.replay import ReplayWindow
from coven_codex.agent.state import SessionState
from coven_codex.agent.writer import DaemonWriter
from coven_codex.entries import BaseEntry, DeltaEntry, ErrorEntry, StatusEntry
from coven_codex.mcp.outcomes import SpellCalls
from coven_codex.rollout import TURN_END_STATES, TURN_STARTED, GeneratedImage, RolloutTranslator
from coven_codex.support.limits import cut
from coven_codex.tailing import Line, TailNotice, tail_lines

log = logging.getLogger(__name__)

AppendHook = Callable[[Line, BaseEntry, float], None]
RolloutCopier = Callable[[Path, str, int], Awaitable[None]]
"""Called with the rollout, its thread and a line's end before the line is translated (the cluster's copy)."""
"""Called after each append with the rollout line, the entry and ``time.perf_counter()`` (benchmarks)."""
ImageSender = Callable[[GeneratedImage], Awaitable[BaseEntry]]
"""Turns an image Codex generated into the entry that sends it (a ``file`` entry) or refuses it (an ``error``)."""


class Egress:
    """Translates one rollout into the journal; see the module docstring."""

    def __init__(
        self,
        *,
        state: SessionState,
        writer: DaemonWriter,
        window: ReplayWindow,
        on_progress: Callable[[], None],
        on_line: Callable[[Line], None] | None = None,
        write_deltas: bool = False,
        on_append: AppendHook | None = None,
        copy_rollout: RolloutCopier | None = None,
        send_image: ImageSender | None = None,
    ) -> None:
        self._state = state
        self._send_image = send_image
        self._copy_rollout = copy_rollout
        self._writer = writer
        self._window = window
        self._on_progress = on_progress
        self._on_line = on_line
        self._write_deltas = write_deltas
        self._on_append = on_append
        self.lines_seen = 0
        self.errors_seen = 0
        """``error`` entries this egress produced from the rollout (written or already there)."""
        self.turn_ends_seen = 0
        """Turn-end ``status`` entries (completed, failed, aborted) it produced likewise."""
        self.turn_starts_seen = 0
        """``turn_started`` entries carrying Codex's turn id (rollouts that record ``task_started``)."""
        self.last_turn_id: str | None = None
        """The turn id of the newest of those: how the rollout names the turn now running."""
        self._progressed = asyncio.Event()

    async def run(self, rollout: Path, thread_id: str) -> None:
        """Tail ``rollout`` until cancelled."""
        translator = RolloutTranslator(
            self._state.conversation,
            thread_id,
            reply_to=self._state.thought_of,
            keep_images=self._send_image is not None,
        )
        spell_calls = SpellCalls()
        resume_at = self._state.egress_offset
        self._window.egress_started(await asyncio.to_thread(complete_length, rollout))
        log.debug("egress for %r: %s from byte %d", cut(self._state.conversation), rollout, resume_at)
        # Released while idle: an idle conversation holds no file descriptor (a rollout is
        # appended to, never replaced, so nothing is lost by reopening it by its path).
        async for line in tail_lines(rollout, 0, on_notice=self._notice, hold_open=False):
            self.lines_seen += 1
            entries = [spell_calls.correct(entry) for entry in translator.feed(line)]
            images = translator.take_images()
            if self._copy_rollout is not None:
                # Before anything of the line counts (its entries, the offset past it, a thought it
                # confirms): a new owner's copy always holds what the mirrored state relies on.
                await self._copy_rollout(rollout, thread_id, line.end)
            if line.end <= resume_at:
                continue
            if self._on_line is not None:
                self._on_line(line)
            if self._send_image is not None:
                entries += [await self._send_image(image) for image in images]
            written = [entry for entry in entries if self._writes(entry)]
            if written:
                # The offset moves inside the window: a snapshot taken while the line's entries
                # are being written keeps the window open (replay.py, rule 2).
                async with self._window.writing():
                    for entry in written:
                        await self._write(line, entry)
                    self._state.egress_offset = line.end
            else:
                self._state.egress_offset = line.end
                self._window.progress()
            self._on_progress()
            self._progressed.set()

    async def reached(self, offset: int) -> None:
        """Return once every line before ``offset`` is in the journal."""
        while self._state.egress_offset < offset:
            self._progressed.clear()
            await self._progressed.wait()

    def _writes(self, entry: BaseEntry) -> bool:
        """Whether ``entry`` goes to the journal (deltas only when asked for)."""
        return self._write_deltas or not isinstance(entry, DeltaEntry)

    async def _write(self, line: Line, entry: BaseEntry) -> None:
        if isinstance(entry, ErrorEntry):
            self.errors_seen += 1
        elif isinstance(entry, StatusEntry) and entry.state in TURN_END_STATES:
            self.turn_ends_seen += 1
        elif isinstance(entry, StatusEntry) and entry.state == TURN_STARTED and entry.turn_id is not None:
            self.turn_starts_seen += 1
            self.last_turn_id = entry.turn_id
        record = await self._writer.append(entry)
        if record is None:
            log.debug("egress: dropping entry %s: it is in the journal already", entry.id)
            return
        if self._on_append is not None:
            self._on_append(line, record.entry, time.perf_counter())

    def _notice(self, notice: TailNotice) -> None:
        log.warning("rollout of conversation %r: %s", cut(self._state.conversation), notice)


def complete_length(path: Path) -> int:
    """The length of ``path`` up to and including its last newline (0 if unreadable)."""
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, 2)
            step = 4096
            position = size
            while position > 0:
                start = max(0, position - step)
                handle.seek(start)
                chunk = handle.read(position - start)
                index = chunk.rfind(b"\n")
                if index >= 0:
                    return start + index + 1
                position = start
    except OSError:
        return 0
    return 0
