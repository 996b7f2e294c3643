"""Running one session's egress task: start it once the thread is known, replace it when the
thread changes, wait for it to catch up with the rollout."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

from coven_codex.agent.egress import Egress, ImageSender, complete_length
from coven_codex.agent.replay import ReplayWindow
from coven_codex.agent.saver import StateSaver
from coven_codex.agent.services import SessionServices
from coven_codex.agent.state import SessionState
from coven_codex.attachments.generated import generated_image_entry
from coven_codex.attachments.store import uploads_dir
from coven_codex.entries import BaseEntry
from coven_codex.journal.opening import local_base
from coven_codex.rollout import GeneratedImage
from coven_codex.settings import state_root
from coven_codex.support.backoff import RepeatFilter
from coven_codex.support.limits import cut
from coven_codex.tailing import Line

log = logging.getLogger(__name__)


class EgressRunner:
    """Owns a session's egress task (module docstring)."""

    def __init__(
        self,
        state: SessionState,
        services: SessionServices,
        saver: StateSaver,
        window: ReplayWindow,
        *,
        on_line: Callable[[Line], None],
    ) -> None:
        self._state = state
        self._window = window
        self._services = services
        self._saver = saver
        self._on_line = on_line
        self._task: asyncio.Task[None] | None = None
        self.egress = self._new()

    def _new(self) -> Egress:
        cluster = self._services.cluster
        copy = None
        if cluster is not None:
            conversation = self._state.conversation

            async def copy(rollout: Path, thread_id: str, end: int) -> None:
                await cluster.copy_rollout(conversation, thread_id, rollout, end)

        return Egress(
            state=self._state,
            writer=self._services.writer,
            window=self._window,
            on_progress=self._saver.request,
            on_line=self._on_line,
            on_append=self._services.on_append,
            copy_rollout=copy,
            send_image=self._image_sender(),
        )

    def _image_sender(self) -> ImageSender | None:
        """How the egress sends an image Codex generated: checked and stored in the journal's
        attachments folder, as ``send_file`` stores a file (none without a journal name)."""
        settings = self._services.settings
        if settings.journal is None:
            return None
        folder = uploads_dir(local_base(settings.journal, state_root()))
        max_bytes = settings.max_file_bytes

        async def send(image: GeneratedImage) -> BaseEntry:
            return await asyncio.to_thread(generated_image_entry, image, folder=folder, max_bytes=max_bytes)

        return send

    def start(self, group: asyncio.TaskGroup) -> None:
        """Start tailing the thread's rollout (once; a no-op until the thread is known)."""
        thread_id = self._state.thread_id
        if self._task is not None or thread_id is None:
            return
        self._task = group.create_task(self._run(thread_id), name=f"egress:{self._state.conversation}")

    async def stop(self) -> None:
        """Stop tailing (the thread changed); a fresh egress is ready for :meth:`start`."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        self.egress = self._new()

    def forget(self) -> None:
        """The task group that ran the task is gone (the session is restarting)."""
        self._task = None
        self.egress = self._new()

    async def _run(self, thread_id: str) -> None:
        path = Path(self._state.rollout_path) if self._state.rollout_path else None
        quiet = RepeatFilter()
        while path is None:
            try:
                path = await self._services.locate_rollout(thread_id)  # waits for the file (inotify)
            except (LookupError, OSError) as exc:
                # Codex writes the file at the thread's first recorded turn, which may come much later
                # (or never, if Codex refuses every thought): keep watching, and say so once.
                note = quiet.note(type(exc).__name__)
                if note is not None:
                    log.warning(
                        "conversation %r: %s; still watching for it %s",
                        cut(self._state.conversation),
                        exc,
                        note or "(logged again every few minutes)",
                    )
                continue
            self._state.rollout_path = str(path)
            self._saver.request()
        await self.egress.run(path, thread_id)

    async def drain(self, limit: float) -> None:
        """Wait (up to ``limit`` seconds) until every complete line of the rollout is in the journal."""
        if self._state.rollout_path is None or self._task is None:
            return
        target = complete_length(Path(self._state.rollout_path))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.egress.reached(target), limit)
