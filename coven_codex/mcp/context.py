"""What a running spell may know and do: report progress, notice cancellation."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Mapping

from pydantic import JsonValue

log = logging.getLogger(__name__)

ProgressSink = Callable[[float, float | None, str | None], None]


class SpellContext:
    """Handed to a spell that declares a parameter annotated ``SpellContext``.

    The parameter is not part of the spell's input schema. Every method is safe to call
    from the worker thread a synchronous spell runs in.
    """

    def __init__(
        self,
        *,
        spell_name: str,
        session: str = "",
        meta: Mapping[str, JsonValue] | None = None,
        progress_sink: ProgressSink | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.spell_name = spell_name
        self.session = session
        self.meta: Mapping[str, JsonValue] = dict(meta or {})
        self._progress_sink = progress_sink
        self._loop = loop
        self._cancelled = threading.Event()
        self._last_progress: float | None = None

    @property
    def thread_id(self) -> str | None:
        """The calling Codex thread (Codex 0.169 sends it in ``_meta``; 0.47 sends nothing)."""
        return self._codex_id("threadId", "thread_id")

    @property
    def turn_id(self) -> str | None:
        """The calling Codex turn, when Codex says (0.169: ``_meta["x-codex-turn-metadata"]``)."""
        return self._codex_id("turnId", "turn_id")

    def _codex_id(self, key: str, turn_metadata_key: str) -> str | None:
        value = self.meta.get(key)
        if isinstance(value, str):
            return value
        turn = self.meta.get("x-codex-turn-metadata")
        nested = turn.get(turn_metadata_key) if isinstance(turn, Mapping) else None
        return nested if isinstance(nested, str) else None

    @property
    def cancelled(self) -> bool:
        """True once the caller cancelled the call or its timeout passed; stop working then."""
        return self._cancelled.is_set()

    def mark_cancelled(self) -> None:
        """The call was cancelled or timed out: :attr:`cancelled` is ``True`` from now on."""
        self._cancelled.set()

    def report_progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """Tell the caller how far the spell got (``notifications/progress``).

        Does nothing when the caller did not ask for progress. ``progress`` must increase from
        one report to the next (MCP requires it); a report that does not is dropped.
        """
        if self._progress_sink is None or self._cancelled.is_set():
            return
        if self._last_progress is not None and progress <= self._last_progress:
            log.debug("spell %s: progress %s does not increase; dropped", self.spell_name, progress)
            return
        self._last_progress = progress
        sink = self._progress_sink
        loop = self._loop
        if loop is None:
            sink(progress, total, message)
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            sink(progress, total, message)
        elif not loop.is_closed():
            loop.call_soon_threadsafe(sink, progress, total, message)
