"""A conversation's Codex thread: the options a new thread takes, a thread replaced, a thread ended by a reset,
a thread taken over from another conversation and one let go to another.

The thread lives in the conversation's state (its id, rollout, egress cursor, workspace, model);
this part changes it when Codex names a thread (a new one replaces the old: a failed resume is
said in the chat), when a thought starts a new thread with its options, when a ``reset``
ends it (``RESETTING``, with Codex closed first), when the conversation takes over a thread
(``resume_thread``: the session manager has any other holder let it go first, then the thread is
this conversation's, its egress starting at the rollout's end) and when another conversation takes
this one's thread (``RESETTING`` as for a reset, then a ``thread_moved`` status).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from pathlib import Path

from coven_codex.agent.chat_settings import SETTINGS_STATE, merged, project_dir
from coven_codex.agent.egress import complete_length
from coven_codex.agent.egress_runner import EgressRunner
from coven_codex.agent.recovery import user_messages
from coven_codex.agent.replay import ReplayWindow
from coven_codex.agent.saver import StateSaver
from coven_codex.agent.services import SessionServices
from coven_codex.agent.state import SessionState
from coven_codex.agent.thread_options import OptionsRefused, check_cwd, reset_workspace
from coven_codex.codex.errors import shorten
from coven_codex.codex.thought import Thought
from coven_codex.conversation.admission import TAKE_OVER_HINT, Admission
from coven_codex.conversation.closing import Closing
from coven_codex.conversation.messages import Queued, Release, ResetRequest
from coven_codex.conversation.outbox import Outbox
from coven_codex.conversation.phases import Phase, PhaseMachine
from coven_codex.entries import ConversationSettings, ErrorEntry, ResetEntry, StatusEntry
from coven_codex.journal import Position
from coven_codex.rollout.locator import find_rollout, read_session_meta
from coven_codex.support.limits import REFUSED_CODE

log = logging.getLogger(__name__)

SESSION_RESET = "session_reset"
"""The status a ``reset`` is answered with."""
THREAD_LOST = "thread_lost"
"""The status saying the conversation's thread could not be resumed and a new one started (the model
no longer sees the earlier turns)."""
THREAD_MOVED = "thread_moved"
"""The status saying another conversation took this one's thread over (the next thought starts a new one)."""
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
        queue: deque[Queued],
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

    async def take_options(self, thought: Thought) -> bool:
        """``thought`` starts a new thread: its options become the thread's (saved before Codex starts);
        with ``resume_thread`` the conversation takes that thread over. ``False``: it could not, and
        the thought is refused (off the queue, one error)."""
        options = thought.options
        if options is None:
            return True
        if options.take_over is not None:
            problem = await self.take_over(options.take_over, thought.position)
            if problem is not None:
                self._queue.remove(thought)
                await self._admission.refuse(thought, problem, TAKE_OVER_HINT)
                return False
        state = self._state
        if options.workspace is not None:
            state.workspace = options.workspace
        if options.model is not None:
            state.model = options.model
        if options.turn_timeout is not None:
            state.turn_timeout = options.turn_timeout
        state.fork_from = options.fork_from
        await self._saver.save_now()
        return True

    async def queue_end(self, end: ResetRequest | Release, unconfirmed: Thought | None) -> bool:
        """Queue a reset (checked first: ``False`` if refused) after what is queued, or a release (another
        conversation takes the thread over) first (after a thought the driver is starting: what runs
        ends first); :meth:`end` acts on it when it is the head. ``True``: the caller interrupts a running
        turn (``False``: the reset was refused, or it is a ``settings`` entry, which waits for the turn's end)."""
        if isinstance(end, ResetRequest):
            if not await self._admission.take_reset(end):
                return False
            self._queue.append(end)
            return end.settings is None
        self._queue.insert(1 if self._queue and self._queue[0] is unconfirmed else 0, end)
        return True

    async def end(self, head: ResetRequest | Release) -> None:
        """The queue's head ends the thread: a reset (:meth:`reset`) or a release (:meth:`release`)."""
        if isinstance(head, ResetRequest):
            await self.reset(head)
        else:
            await self.release(head)

    async def take_over(self, thread_id: str, cause: Position) -> str | None:
        """The conversation (with no thread now) continues ``thread_id``: the session manager has any
        other conversation holding it let it go first (saved there before this saves), then the thread
        is this conversation's, egress starting after what the rollout holds. Returns why it could not."""
        svc = self._svc
        if svc.hand_thread is not None:
            problem = await svc.hand_thread(thread_id, self._state.conversation, str(cause))
            if problem is not None:
                return problem
        rollout = await asyncio.to_thread(find_rollout, svc.codex_home, thread_id) if svc.codex_home else None
        state = self._state
        state.forget_thread()
        self._window.thread_ended()
        state.thread_id = thread_id
        state.fork_from = None
        state.workspace = None
        if rollout is not None:
            state.rollout_path = str(rollout)
            state.egress_offset = await asyncio.to_thread(complete_length, rollout)
            state.user_messages = (await asyncio.to_thread(user_messages, rollout)).count
            state.workspace = await asyncio.to_thread(self._thread_directory, rollout)
        log.info("conversation %r: takes over Codex thread %s", self._name, thread_id)
        await self._saver.save_now()
        return None

    def _thread_directory(self, rollout: Path) -> str | None:
        """The directory the thread worked in (its rollout's ``session_meta``), if it is still allowed
        (inside the workspace or a root); else ``None``: the daemon's workspace."""
        meta = read_session_meta(rollout)
        if meta is None or meta.cwd is None:
            return None
        try:
            return check_cwd(meta.cwd, self._svc.settings.cwd_roots)
        except OptionsRefused:
            return None

    async def release(self, release: Release) -> None:
        """Another conversation takes the thread over (what ran is over; ``IDLE`` or ``READY``): close
        Codex, bring the rest of the rollout, forget the thread (saved), say where it went, ``IDLE``."""
        state = self._state
        self._queue.remove(release)
        if state.thread_id != release.thread_id:  # (let go already: a reset came first)
            if not release.done.done():
                release.done.set_result(None)
            return
        log.info("conversation %r: Codex thread %s moves to conversation %r", self._name, state.thread_id, release.to)
        await self._closing.end(reason="thread moved")
        self._phases.move(Phase.RESETTING)
        await self._egress.drain(RESET_DRAIN)
        await self._egress.stop()
        await self._outbox.emit(
            StatusEntry(
                id=f"thread-moved@{release.cause}",
                state=THREAD_MOVED,
                thread_id=release.thread_id,
                text=f"Codex thread {release.thread_id} moved to conversation {release.to!r}, which continues "
                "it; the next message here starts a new thread",
            )
        )
        state.forget_thread()
        self._window.thread_ended()
        state.reply_to = None
        await self._saver.save_now()
        self._phases.move(Phase.IDLE)
        if not release.done.done():
            release.done.set_result(None)

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
            state.expect_reply(in_flight.model_copy(update={"ordinal": 0}))
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
        wanted = reset.resume_thread
        problem = await self.take_over(wanted, reset.position) if wanted is not None and wanted != old else None
        if problem is not None:
            await self._outbox.emit(
                ErrorEntry(
                    id=f"refused@{reset.position}",
                    code=REFUSED_CODE,
                    text=shorten(f"This conversation could not take over Codex thread {wanted}: {problem}."),
                    hint="Try again in a moment; this conversation keeps its own thread meanwhile.",
                )
            )
        elif change is not None:  # a new project: a new thread in its directory
            state.chat = merged(state.chat, change)
            then = f"the next message starts a new Codex thread in {change.project}"
            await self._outbox.emit(self._settings_status(reset, then, thread_id=None))
        else:
            await self._outbox.emit(
                StatusEntry(
                    id=f"reset@{reset.position}", state=SESSION_RESET, thread_id=old, text=reset_text(old, wanted)
                )
            )
        self._queue.remove(reset)
        self._admission.forget(reset.entry_id)
        if wanted is None:
            state.forget_thread()
            self._window.thread_ended()
        if wanted is None or problem is None:  # (a failed take-over leaves the conversation's thread as it was)
            if wanted is None or reset.cwd is not None:  # (a thread taken over keeps its own directory)
                state.workspace = await self._workspace(reset)
            state.model = state.chat.model
            state.turn_timeout = state.fork_from = None
        state.reply_to = None
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


def reset_text(old: str | None, taken: str | None) -> str:
    """What a ``reset`` status says: the thread that ended, and what comes next."""
    if taken is not None:
        ended = f"Codex thread {old} ended; " if old is not None and old != taken else ""
        return f"{ended}this conversation continues Codex thread {taken} (the model sees its earlier turns)"
    if old is None:
        return "no Codex thread was open; a new thread starts with the next thought"
    return f"Codex thread {old} ended; a new thread starts with the next thought"
