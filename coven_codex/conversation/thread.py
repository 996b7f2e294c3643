"""A conversation's Codex thread: the options a new thread takes, a thread replaced, a thread ended by a reset.

The thread lives in the conversation's state (its id, rollout, egress cursor, workspace, model);
this part changes it when Codex names a thread (a new one replaces the old: a failed resume is
said in the chat), when a thought starts a new thread with its options, and when a ``reset``
ends it (``RESETTING``, with Codex closed first).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque

from coven_codex.agent.chat_settings import SETTINGS_STATE, merged, project_dir
from coven_codex.agent.egress_runner import EgressRunner
from coven_codex.agent.replay import ReplayWindow
from coven_codex.agent.saver import StateSaver
from coven_codex.agent.services import PendingThought, SessionServices
from coven_codex.agent.state import SessionState
from coven_codex.agent.thread_options import OptionsRefused, reset_workspace
from coven_codex.conversation.admission import Admission
from coven_codex.conversation.closing import Closing
from coven_codex.conversation.messages import ResetRequest
from coven_codex.conversation.outbox import Outbox
from coven_codex.conversation.phases import Phase, PhaseMachine
from coven_codex.entries import ConversationSettings, ResetEntry, StatusEntry

log = logging.getLogger(__name__)

SESSION_RESET = "session_reset"
"""The status a ``reset`` is answered with."""
THREAD_LOST = "thread_lost"
"""The status saying the conversation's thread could not be resumed and a new one started (the model
no longer sees the earlier turns)."""
RESET_DRAIN = 5.0
"""After the thread's last turn, how long a reset waits for egress to bring the rest of its rollout."""


class ThreadKeeper:
    """Changes the conversation's thread (module docstring)."""

    def __init__(
        self,
        state: SessionState,
        services: SessionServices,
        saver: StateSaver,
        *,
        egress: EgressRunner,
        window: ReplayWindow,
        outbox: Outbox,
        admission: Admission,
        queue: deque[PendingThought | ResetRequest],
        closing: Closing,
        phases: PhaseMachine,
        name: str,
    ) -> None:
        self._state = state
        self._svc = services
        self._saver = saver
        self._egress = egress
        self._window = window
        self._outbox = outbox
        self._admission = admission
        self._queue = queue
        self._closing = closing
        self._phases = phases
        self._name = name

    async def take_options(self, thought: PendingThought) -> None:
        """``thought`` starts a new thread: its options become the thread's (saved before Codex starts)."""
        options = thought.options
        if options is None:
            return
        state = self._state
        if options.workspace is not None:
            state.workspace = options.workspace
        if options.model is not None:
            state.model = options.model
        if options.turn_timeout is not None:
            state.turn_timeout = options.turn_timeout
        state.fork_from = options.fork_from
        await self._saver.save_now()

    async def named(self, thread_id: str) -> None:
        """Codex told the thread id: a new one replaces the old thread (its egress, its state).

        The caller starts egress on the thread afterwards."""
        state = self._state
        old = state.thread_id
        if thread_id == old:
            return
        if old is not None:
            # Only a failed resume replaces a thread (a reset forgets it first): say so in the chat.
            log.warning("conversation %r: Codex thread %s replaced by %s", self._name, old, thread_id)
            await self._outbox.emit(
                StatusEntry(
                    id=f"thread-lost@{old}",
                    state=THREAD_LOST,
                    thread_id=thread_id,
                    text=f"Codex could not resume thread {old} and started thread {thread_id}: "
                    "the model no longer sees the earlier turns of this conversation",
                )
            )
        await self._egress.stop()
        state.forget_thread()
        self._window.thread_ended()
        state.thread_id = thread_id
        state.fork_from = None
        in_flight = state.in_flight
        if in_flight is not None:  # the thought being handed over is the new thread's first message
            state.expect_reply(in_flight.thought_id, in_flight.text, 0)
        await self._saver.save_now()

    async def reset(self, reset: ResetRequest) -> None:
        """End the thread (everything before the reset is done; Codex is closed, ``RESETTING``): the
        next thought starts a new one (``IDLE``).

        Its status has an id of the reset's journal position and is written before the state
        records the reset as done (in the same save that forgets the thread): a daemon killed in
        between acts on it again, which ends the same thread again and finds the status written.
        """
        state = self._state
        old = state.thread_id
        change = reset.settings
        if change is not None and (change.project is None or change.project == state.chat.project):
            await self._keep_thread(reset, change)
            return
        log.info("conversation %r: reset; thread %s ends", self._name, old)
        await self._closing.end(reason="reset")
        self._phases.move(Phase.RESETTING)
        await self._egress.drain(RESET_DRAIN)  # the old thread's last entries first
        await self._egress.stop()
        if change is not None:  # a new project: a new thread in its directory
            state.chat = merged(state.chat, change)
            then = f"the next message starts a new Codex thread in {change.project}"
            await self._outbox.emit(self._settings_status(reset, then, thread_id=None))
        else:
            if old is None:
                text = "no Codex thread was open; a new thread starts with the next thought"
            else:
                text = f"Codex thread {old} ended; a new thread starts with the next thought"
            await self._outbox.emit(
                StatusEntry(id=f"reset@{reset.position}", state=SESSION_RESET, thread_id=old, text=text)
            )
        self._queue.remove(reset)
        self._admission.forget(reset.entry_id)
        state.forget_thread()
        self._window.thread_ended()
        state.reply_to = None
        state.workspace = await self._workspace(reset)
        state.model = state.chat.model
        state.turn_timeout = state.fork_from = None
        await self._done(reset)
        self._phases.move(Phase.IDLE)

    async def _keep_thread(self, reset: ResetRequest, change: ConversationSettings) -> None:
        """A ``settings`` entry changing the model or the mode (or nothing): the open driver is closed, and the
        next thought resumes the same thread with them (Codex takes both on ``thread/resume``)."""
        state = self._state
        await self._closing.end(reason="settings changed")
        state.chat = merged(state.chat, change)
        if change.model is not None:
            state.model = change.model
        where = f"thread {state.thread_id}" if state.thread_id is not None else "a new Codex thread"
        then = f"the next message continues in {where} with them"
        await self._outbox.emit(self._settings_status(reset, then, thread_id=state.thread_id))
        self._queue.remove(reset)
        self._admission.forget(reset.entry_id)
        await self._done(reset)

    def _settings_status(self, reset: ResetRequest, then: str, *, thread_id: str | None) -> StatusEntry:
        """The answer to a ``settings`` entry: the settings now, and what happens next."""
        chat = self._state.chat
        shown = "; ".join(
            f"{name}: {value}"
            for name, value in (("project", chat.project), ("model", chat.model), ("mode", chat.mode))
            if value is not None
        )
        return StatusEntry(
            id=f"settings@{reset.position}",
            state=SETTINGS_STATE,
            thread_id=thread_id,
            settings=chat,
            text=f"{shown or 'the daemon defaults'}; {then}",
        )

    async def _done(self, reset: ResetRequest) -> None:
        """The reset (or settings entry) is acted on: recorded as delivered in the same save, its position finished."""
        state = self._state
        state.delivered[reset.entry_id] = reset.position
        await self._saver.save_now()
        self._svc.finish_thought(reset.position)

    async def _workspace(self, reset: ResetRequest) -> str | None:
        """The next thread's directory, as the reset names it (else the chat's project's; ``None``: the daemon's)."""
        if reset.cwd is None:
            return await asyncio.to_thread(project_dir, self._state.chat, self._svc.settings)
        try:
            return await asyncio.to_thread(reset_workspace, ResetEntry(cwd=reset.cwd), self._svc.settings.cwd_roots)
        except OptionsRefused as exc:  # (checked on arrival; it changed since)
            log.warning("conversation %r: the reset's cwd is no longer usable (%s)", self._name, exc)
            return None
