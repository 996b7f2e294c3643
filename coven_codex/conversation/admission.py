"""A conversation's admission of thoughts and resets: what is taken, what is refused, what is pending.

Ingress offers entries synchronously (:meth:`Admission.offer_thought`, :meth:`Admission.offer_reset`):
a thought delivered before is passed over, one reusing another's id is reported, anything else
goes to the conversation's inbox and its journal position stays pending until the conversation
settles it. On the conversation's task, :meth:`Admission.take_thought` checks a thought's thread
options and attachments and returns it ready for the queue, or refuses it (one ``REFUSED`` error).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Collection

from coven_codex.agent.chat_settings import SETTINGS_STATE, SettingRefused, check_change, describe
from coven_codex.agent.services import SessionServices
from coven_codex.agent.state import SessionState
from coven_codex.agent.thread_options import (
    REFUSED_HINT,
    OptionsRefused,
    check_thread_id,
    requests_options,
    reset_workspace,
    thought_options,
)
from coven_codex.attachments.checks import AttachmentRefused, check_images, uploads_dir
from coven_codex.codex.errors import shorten
from coven_codex.codex.thought import Thought
from coven_codex.conversation.messages import Duplicate, Message, ResetRequest
from coven_codex.conversation.outbox import Outbox
from coven_codex.entries import ConversationSettings, ErrorEntry, ResetEntry, SettingsEntry, StatusEntry, ThoughtEntry
from coven_codex.journal import Position
from coven_codex.journal.opening import local_base
from coven_codex.rollout.locator import find_rollout
from coven_codex.settings import state_root
from coven_codex.support.limits import MAX_ID_CHARS, REFUSED_CODE, cut

log = logging.getLogger(__name__)

TAKE_OVER_HINT = (
    "Check the thread id (chat: `/resume` lists the threads you can continue; a job's thread is in "
    "`coven-codex job status`), or leave resume_thread out to start a new thread; and send it again."
)
ATTACHMENTS_HINT = (
    "Attach PNG, JPEG, GIF or WebP images stored by the adapter in the journal's attachments "
    "folder (within max_attachment_bytes), and send it again."
)


class Admission:
    """The thoughts and resets routed to one conversation and not settled yet (module docstring)."""

    def __init__(
        self, state: SessionState, services: SessionServices, outbox: Outbox, post: Callable[[Message], None]
    ) -> None:
        self._state = state
        self._svc = services
        self._outbox = outbox
        self._post = post
        self._name = cut(state.conversation)
        self._pending: dict[str, Position] = {}
        """Ids of the thoughts and resets in the inbox or the queue, with their journal positions."""
        self._requested: dict[str, ThoughtEntry] = {}
        """Pending thoughts that give thread options, by id (checked when the conversation takes them)."""

    @property
    def positions(self) -> Collection[Position]:
        """Journal positions of the thoughts and resets not settled yet."""
        return self._pending.values()

    def _known(self, entry_id: str, position: Position) -> bool:
        """Whether ``entry_id`` was seen before (a different entry reusing it is reported)."""
        earlier = self._state.delivered.get(entry_id)
        if earlier is None:
            earlier = self._pending.get(entry_id)
        if earlier is not None and earlier != position:
            self._post(Duplicate(entry_id, position))
        return earlier is not None

    def offer_thought(self, entry: ThoughtEntry, position: Position) -> bool:
        """Pend a thought unless it was delivered before; ``True`` if it is now pending."""
        assert entry.id is not None
        if self._known(entry.id, position):
            return False
        self._pending[entry.id] = position
        if requests_options(entry):
            self._requested[entry.id] = entry
        self._post(Thought.admitted(entry, position))
        if self._svc.instruments is not None:
            self._svc.instruments.thought_received(entry.id)
        return True

    def offer_reset(self, entry: ResetEntry | SettingsEntry, position: Position) -> bool:
        """Pend a ``reset`` (or a ``settings`` entry) unless it was acted on before; ``True`` if it is now pending."""
        assert entry.id is not None
        if self._known(entry.id, position):
            return False
        self._pending[entry.id] = position
        if isinstance(entry, SettingsEntry):
            self._post(ResetRequest(entry.id, position, settings=entry.change))
        else:
            self._post(ResetRequest(entry.id, position, entry.cwd, entry.resume_thread))
        return True

    def settle(self, entry_id: str, position: Position) -> None:
        """The thought or reset is done with (delivered, dropped, refused, acted on): its position is finished."""
        self._pending.pop(entry_id, None)
        self._svc.finish_thought(position)

    def forget(self, entry_id: str) -> None:
        """The entry is no longer pending here (its position is settled by whoever finishes it)."""
        self._pending.pop(entry_id, None)

    def give_back(self) -> None:
        """Another daemon serves the conversation: every pending position is finished here, unsettled."""
        for position in self._pending.values():
            self._svc.finish_thought(position)
        self._pending.clear()

    async def take_thought(self, thought: Thought) -> Thought | None:
        """``thought`` with its thread options and images checked, or ``None``: refused (and settled)."""
        settings, caps = self._svc.settings, self._svc.make_driver.plan
        requested = self._requested.pop(thought.id, None)
        if requested is not None:
            try:
                options = await asyncio.to_thread(
                    thought_options,
                    requested,
                    settings.cwd_roots,
                    turn_timeout=settings.turn_timeout,
                    forks_threads=caps.forks_threads,
                )
            except OptionsRefused as exc:
                await self._refuse(thought, str(exc), REFUSED_HINT)
                return None
            unknown = await self._unknown_thread(options.take_over if options is not None else None)
            if unknown is not None:
                await self._refuse(thought, unknown, TAKE_OVER_HINT)
                return None
            thought = dataclasses.replace(thought, options=options)
        if thought.attachments and not caps.takes_images:
            # (Codex 0.47's `exec --image ... resume <thread> -` sent the image without the text)
            why = (
                "images need the app-server driver, which this Codex does not offer (docs/rollout.md); it runs on exec"
            )
            await self._refuse(thought, why, ATTACHMENTS_HINT)
            return None
        if thought.attachments:
            journal = settings.journal
            try:
                images = await asyncio.to_thread(
                    check_images,
                    thought.attachments,
                    folder=uploads_dir(local_base(journal, state_root())) if journal is not None else None,
                    max_bytes=settings.max_attachment_bytes,
                    urls=caps.image_urls,
                )
            except AttachmentRefused as exc:
                await self._refuse(thought, str(exc), ATTACHMENTS_HINT)
                return None
            thought = dataclasses.replace(thought, images=images)
        return thought

    async def _unknown_thread(self, thread_id: str | None) -> str | None:
        """Why ``thread_id`` (a thread to take over) is unknown to this daemon's Codex, if it is: it has
        no rollout in ``CODEX_HOME`` (Codex writes one at a thread's first turn)."""
        codex_home = self._svc.codex_home
        if thread_id is None or codex_home is None:
            return None
        if await asyncio.to_thread(find_rollout, codex_home, thread_id) is not None:
            return None
        return (
            f"Codex has no thread {cut(thread_id, 80)!r} (no rollout of it in this daemon's CODEX_HOME): "
            "it was never started here, or it never ran a turn"
        )

    async def refuse(self, thought: Thought, why: str, hint: str) -> None:
        """``thought`` (taken off the queue) is not handed to Codex: one ``REFUSED`` error; it is settled."""
        await self._refuse(thought, why, hint)

    async def _refuse(self, thought: Thought, why: str, hint: str) -> None:
        """``thought`` is not handed to Codex: one ``REFUSED`` error (its id from the position), and it is settled."""
        log.warning("conversation %r: thought at journal position %s refused: %s", self._name, thought.position, why)
        await self._outbox.emit(
            ErrorEntry(
                id=f"refused@{thought.position}",
                code=REFUSED_CODE,
                text=shorten(f"The thought at journal position {thought.position} was not handed to Codex: {why}."),
                hint=hint,
                in_reply_to=thought.id,
            )
        )
        self.settle(thought.id, thought.position)

    async def take_reset(self, reset: ResetRequest) -> bool:
        """A reset naming a ``cwd`` outside the workspace roots, or a thread to take over that Codex does
        not know, is refused (one error; nothing changes); so is a ``settings`` entry asking for what the
        operator does not allow. A question about the settings is answered."""
        if reset.settings is not None:
            return await self._take_settings(reset, reset.settings)
        try:
            if reset.cwd is not None:
                await asyncio.to_thread(reset_workspace, ResetEntry(cwd=reset.cwd), self._svc.settings.cwd_roots)
            if reset.resume_thread is not None:
                check_thread_id(reset.resume_thread, "resume_thread")
                unknown = await self._unknown_thread(reset.resume_thread)
                if unknown is not None:
                    raise OptionsRefused(unknown)
        except OptionsRefused as exc:
            log.warning("conversation %r: reset at journal position %s refused: %s", self._name, reset.position, exc)
            hint = REFUSED_HINT if reset.resume_thread is None else TAKE_OVER_HINT
            await self._outbox.emit(
                ErrorEntry(
                    id=f"refused@{reset.position}",
                    code=REFUSED_CODE,
                    text=shorten(f"The reset at journal position {reset.position} was not acted on: {exc}."),
                    hint=hint,
                )
            )
            self.settle(reset.entry_id, reset.position)
            return False
        return True

    async def _take_settings(self, request: ResetRequest, change: ConversationSettings) -> bool:
        """``True``: ``change`` is allowed (it waits its turn in the queue); else answered (a question) or refused."""
        settings = self._svc.settings
        if change == ConversationSettings():
            await self._outbox.emit(
                StatusEntry(
                    id=f"settings@{request.position}",
                    state=SETTINGS_STATE,
                    thread_id=self._state.thread_id,
                    settings=self._state.chat,
                    text=describe(self._state.chat, settings),
                )
            )
        else:
            try:
                await asyncio.to_thread(check_change, change, settings)
            except SettingRefused as exc:
                log.info(
                    "conversation %r: settings at journal position %s refused: %s",
                    self._name,
                    request.position,
                    exc.message,
                )
                await self._outbox.emit(
                    ErrorEntry(
                        id=f"refused@{request.position}", code=REFUSED_CODE, text=f"{exc.message}.", hint=exc.hint
                    )
                )
            else:
                return True
        self.settle(request.entry_id, request.position)
        return False

    async def report_duplicate(self, message: Duplicate) -> None:
        """A thought reused an earlier thought's id: one ``REFUSED`` error (it is dropped)."""
        shown = cut(message.entry_id, MAX_ID_CHARS)
        log.warning(
            "conversation %r: thought at journal position %s reuses the id %s of an earlier thought; dropped",
            self._name,
            message.position,
            cut(message.entry_id),
        )
        await self._outbox.emit(
            ErrorEntry(
                id=f"duplicate-id@{message.position}",
                code=REFUSED_CODE,
                text=shorten(
                    f"The thought at journal position {message.position} was dropped: its id {shown!r} "
                    "is the id of an earlier thought."
                ),
                hint="Give every thought its own id (or none: the journal assigns one) and send it again.",
            )
        )
