"""The adapter loop: tail the journal for the adapter's conversations and drive a :class:`Platform`.

:class:`AdapterRunner` runs, under one task group:

- **the reader** follows the journal from the adapter's saved cursor (``adapter <name>``) and
  hands every entry of its conversations to that conversation's **lane**;
- **a lane per conversation** renders its entries (:mod:`~coven_codex.adapters.kit.render`),
  splits them at the dialect's limit and posts them through the
  :mod:`~coven_codex.adapters.kit.ledger` (exactly once), in order; ``delta`` entries grow one
  streamed message per reply (:mod:`~coven_codex.adapters.kit.streaming`), edited at most once
  per ``capabilities.edit_interval``, that the final ``response`` replaces;
  ``turn_started``/turn ends switch the typing indicator. Lanes are independent: a rate limit
  or an outage one conversation waits out never holds another;
- **the saver** saves the cursor: never past an entry some lane has not delivered yet, nor past
  the first delta of a stream still open;
- **ingress** takes what users do (:meth:`Platform.incoming`), checks access, runs commands and
  appends ``thought`` entries. When the platform's incoming stream ends, the runner stops.

What a platform answers is classified once (:mod:`~coven_codex.adapters.kit.platform`):
:class:`RateLimited` is waited out (at most :data:`MAX_RETRY_AFTER` per wait) by its lane only;
:class:`Unavailable` is retried with backoff (:data:`BACKOFF`), a post looked up first; a
refusal of one message falls back to plain text, then to smaller parts, then shows one notice;
a refusal of the channel is a notice where one can be posted, else a log line; a fatal refusal
stops the runner with its message. Nothing a platform answers ends the runner otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Literal, ParamSpec, TypeVar

from coven_codex.adapters.kit.access import AccessPolicy
from coven_codex.adapters.kit.card import Card, CardPhase, Cards, card_end_key, card_key, is_step
from coven_codex.adapters.kit.commands import (
    DECISIONS,
    HELP,
    SETTINGS_STATE,
    Command,
    ConversationState,
    parse_command,
    settings_entry,
    settings_sent,
)
from coven_codex.adapters.kit.files import caption_of, upload_of
from coven_codex.adapters.kit.history import (
    SENDER_ID_FIELD,
    ChatIndex,
    format_history,
    format_list,
    parse_count,
    sender_id,
    settled,
)
from coven_codex.adapters.kit.ledger import DeliveryLedger, content_digest, delivery_key
from coven_codex.adapters.kit.mapping import ConversationMap
from coven_codex.adapters.kit.platform import (
    Address,
    Button,
    ButtonPress,
    FindsByContent,
    Incoming,
    IncomingMessage,
    NamesPlaces,
    Outgoing,
    Platform,
    PlatformError,
    RateLimited,
    Refusal,
    Unavailable,
    User,
)
from coven_codex.adapters.kit.render import (
    DECIDED,
    Block,
    RenderMode,
    RenderOptions,
    clip,
    format_block,
    render_entry,
)
from coven_codex.adapters.kit.resume import ORIGIN_FIELD, ThreadIndex, resume_command
from coven_codex.adapters.kit.split import split_message
from coven_codex.adapters.kit.streaming import Stream, Streams
from coven_codex.adapters.kit.threads import FollowedThreads
from coven_codex.entries import (
    ApprovalEntry,
    ApprovalRequestEntry,
    BaseEntry,
    CancelEntry,
    DeltaEntry,
    ErrorEntry,
    FileEntry,
    ResetEntry,
    ResponseEntry,
    SettingsEntry,
    StatusEntry,
    ThoughtEntry,
)
from coven_codex.journal import START, BadLine, Journal, JournalError, JournalRecord, Position
from coven_codex.metrics.checks import journal_reachable, report_lag
from coven_codex.metrics.instruments import Instruments
from coven_codex.metrics.options import MetricsOptions
from coven_codex.metrics.server import MetricsServer

log = logging.getLogger(__name__)

MAX_RETRY_AFTER = 300.0
"""The longest single wait for a platform's rate limit; longer requests wait this long, then retry."""
BACKOFF = (0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0)
"""Waits between tries of a call the platform failed (:class:`Unavailable`); the last repeats for ever."""
MAX_AHEAD = 1000
"""Entries read from the journal but not yet delivered, at most (the reader waits beyond)."""
SMALL_PART = 500
"""The size of the smaller parts a refused message is tried in (the last fallback before a notice)."""
TURN_ENDS = frozenset({"turn_completed", "turn_aborted", "turn_failed"})
TYPING_LIMIT = 3600.0
"""Seconds a typing indicator is kept up at most without the turn's end (a daemon that died mid-turn)."""
SESSION_RESET = "session_reset"
"""The daemon's answer to a ``reset``: the thread it names has ended."""
THREAD_MOVED = "thread_moved"
"""The daemon's word that another conversation took this one's thread over (it has none now)."""

CANCEL_BUTTONS = (Button("Cancel", "cancel"),)
"""The button a reply being streamed (or an open progress card) carries; the final reply has none."""
DETAILS_LIMIT = 12_000
"""Characters of a turn's tool output ``details`` shows at most (in as many messages as the platform needs)."""
OUTCOMES = {"turn_completed": "done", "turn_aborted": "cancelled", "turn_failed": "failed"}
"""What a closed progress card says of its turn, by the status that ended it (an error: ``failed``)."""

T = TypeVar("T")
P = ParamSpec("P")


def _only_entry(refused: PlatformError) -> None:
    """Let a refusal of this message be handled where it was caught; any wider one propagates."""
    if refused.refusal is not Refusal.ENTRY:
        raise refused


def cursor_name(name: str) -> str:
    """The journal cursor of the adapter ``name``."""
    return f"adapter {name}"


@dataclass(frozen=True, slots=True)
class RunnerOptions:
    """How a runner behaves: what it renders, where a first run starts, the command prefix."""

    render: RenderOptions = RenderOptions()  # noqa: RUF009 - frozen, shared safely
    start: Literal["end", "beginning"] = "end"
    """Where the first run (no saved cursor) starts reading: only new entries, or everything."""
    command_prefix: str = "/"
    resume: bool = True
    """Save a cursor and resume from it after a restart; False starts at ``start`` every run (the console)."""
    history: int = 0
    """On a run without a saved cursor, first show up to this many earlier entries of its conversations."""


class LanePhase(StrEnum):
    """Where a conversation's lane is: nothing to do, delivering, or waiting out the platform."""

    IDLE = "idle"
    DELIVERING = "delivering"
    WAITING = "waiting"
    """A rate limit or an outage: this lane waits; the others go on."""


@dataclass(frozen=True, slots=True)
class _Entry:
    """A journal record for a lane to show; ``seq`` orders the reader's outstanding entries."""

    seq: int
    record: JournalRecord
    address: Address


@dataclass(frozen=True, slots=True)
class _Asked:
    """An approval request's message: where it is, what it says, its buttons (to show the answer in place)."""

    address: Address
    message_id: str
    message: Outgoing


@dataclass(frozen=True, slots=True)
class _Notice:
    """A notice (not tied to an entry) a lane posts, e.g. a reply the platform did not take at once."""

    address: Address
    message: Outgoing


@dataclass
class Lane:
    """One conversation's queue of things to show, worked through in order by its own task."""

    conversation: str
    items: deque[_Entry | _Notice] = field(default_factory=deque)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    phase: LanePhase = LanePhase.IDLE
    typing: Address | None = None
    """Where the typing indicator is on (a turn runs), for platforms whose indicator fades by itself."""
    typing_at: float = float("-inf")
    typing_since: float = float("-inf")


_LANE: contextvars.ContextVar[Lane | None] = contextvars.ContextVar("lane", default=None)
"""The lane the running task works for (a wait marks it waiting)."""


class AdapterRunner:
    """One adapter: a journal, a platform, a conversation map, an access policy and a delivery ledger."""

    def __init__(
        self,
        journal: Journal,
        platform: Platform,
        mapping: ConversationMap,
        access: AccessPolicy,
        ledger: DeliveryLedger,
        *,
        name: str,
        options: RunnerOptions = RunnerOptions(),
        metrics: MetricsOptions | None = None,
        follows: FollowedThreads | None = None,
    ) -> None:
        """``metrics``: serve ``/metrics``, ``/healthz``, ``/readyz`` while running (docs/operations.md);
        ``follows``: the threads the platform takes messages from without a mention, which every
        thread conversation read from the journal joins (:mod:`~coven_codex.adapters.kit.threads`)."""
        self.journal = journal
        self.platform = platform
        self.mapping = mapping
        self.access = access
        self.ledger = ledger
        self.name = name
        self.options = options
        self.states: dict[str, ConversationState] = {}
        self.threads = ThreadIndex()
        """The Codex threads seen and who took part where (``/resume``), fed by :attr:`index`."""
        self.index = ChatIndex(also=self.threads.add)
        """Each sender's conversations and each conversation's last exchanges (``/list``, ``/history``)."""
        self._streams = Streams()
        self._cards = Cards()
        self._asked: dict[tuple[str, str], _Asked] = {}
        """The message of each approval request shown (conversation, request id), to update once answered."""
        self._lanes: dict[str, Lane] = {}
        self._group: asyncio.TaskGroup | None = None
        self._outstanding: dict[int, Position] = {}
        self._seq = 0
        self._read_end: Position | None = None
        self._progress = asyncio.Event()
        self._room = asyncio.Event()
        self._saved: Position | None = None
        self._waiting = False
        self._unavailable = False
        self._refused_channels: set[str] = set()
        self._lane_tasks: list[asyncio.Task[None]] = []
        self.ready = asyncio.Event()
        """Set once the runner follows the journal (history, if any, shown)."""
        self.metrics = metrics
        self.follows = follows
        self.instruments = Instruments() if metrics is not None else None
        self._reading_platform = False

    async def run(self) -> None:
        """Follow the journal and the platform until the platform's incoming stream ends."""
        described = self.access.describe()
        log.log(logging.WARNING if self.access.allows_nobody else logging.INFO, "adapter %s: %s", self.name, described)
        try:
            async with contextlib.AsyncExitStack() as stack, asyncio.TaskGroup() as group:
                await self._serve_metrics(stack)
                self._group = group
                egress = group.create_task(self._egress())
                saver = group.create_task(self._saver())
                try:
                    self._reading_platform = True
                    async for event in self.platform.incoming():
                        await self.handle(event)
                finally:
                    self._reading_platform = False
                    self._group = None
                    egress.cancel()
                    saver.cancel()
                    for task in self._lane_tasks:
                        task.cancel()
        except* PlatformError as failed:
            # Only a fatal refusal leaves a lane or ingress (the token revoked): said once, clearly.
            raise failed.exceptions[0] from None

    async def _serve_metrics(self, stack: contextlib.AsyncExitStack) -> None:
        """Start the metrics port, if asked for: checks ``journal`` and ``platform``."""
        if self.metrics is None or self.instruments is None:
            return
        instruments = self.instruments

        async def platform() -> str | None:
            if not self._reading_platform or not self.ready.is_set():
                return f"not yet following the journal and reading {self.platform.name}"
            return None

        async def refresh() -> None:
            instruments.ledger_intents_pending.set(self.ledger.pending)
            instruments.platform_connected.set(1 if self._reading_platform else 0)
            if self._saved is not None:
                await report_lag(self.journal, instruments, "adapter", self._saved)

        instruments.refreshers.append(refresh)
        checks = {"journal": journal_reachable(self.journal, instruments), "platform": platform}
        try:
            await stack.enter_async_context(MetricsServer.of(self.metrics, instruments, checks))
        except OSError as exc:
            raise PlatformError(str(exc)) from None

    # ----------------------------------------------------------------- ingress

    async def handle(self, event: Incoming) -> None:
        """Act on one thing a user did: refuse it, run a command, or append a thought.

        Nothing the platform answers while doing so ends the runner, except a fatal refusal.
        """
        try:
            await self._handle(event)
        except PlatformError as refused:
            if refused.refusal is Refusal.FATAL:
                raise
            self._log_refusal(event.address, refused, "an answer to a user")

    async def _handle(self, event: Incoming) -> None:
        if isinstance(event, ButtonPress):
            command = parse_command(event.action, prefix="")
            text = event.action
        else:
            command = parse_command(event.text, self.options.command_prefix)
            text = event.text
        refusal = self.access.refusal(event.user, event.address, command.name if command else None)
        if refusal is not None:
            log.info(
                "adapter %s: refused %s at %s", self.name, clip(event.user.id, 64), clip(event.address.channel, 64)
            )
            await self.reply(event.address, refusal)
            return
        conversation = self.mapping.conversation(event.address, event.user)
        if command is not None:
            await self._command(command, conversation, event.address, event.user)
            return
        if not text.strip() and not (isinstance(event, IncomingMessage) and event.attachments):
            return
        attachments = list(event.attachments) if isinstance(event, IncomingMessage) else []
        thought = ThoughtEntry(conversation=conversation, sender=event.user.label, text=text, attachments=attachments)
        thought = thought.model_copy(update={SENDER_ID_FIELD: sender_id(self.platform.name, event.user.id)})
        key = (
            delivery_key(f"{self.platform.name}\x00{event.message_id}", "in")
            if isinstance(event, IncomingMessage) and event.message_id
            else None
        )
        if key is not None:
            known = self.ledger.get(key)
            if known is not None and known.message_id:
                log.debug("adapter %s: a message delivered again is not sent twice", self.name)
                return
            # An intent alone: the crash came during the append; appended again under the same
            # entry id, which the daemon takes once.
            thought = thought.model_copy(update={"id": f"{self.platform.name}-{key}"})
        try:
            if key is not None:
                await self.ledger.intend(key)
            await self.append(thought)
            if key is not None:
                await self.ledger.done(key, thought.id or "")
        except JournalError as refused:
            # Too long for the journal's line limit, or the journal cannot be written: the user hears it.
            log.warning("adapter %s: a message was not sent: %s", self.name, clip(str(refused), 300))
            await self.reply(event.address, f"your message was not sent: {clip(str(refused), 300)}")

    async def append(self, entry: BaseEntry) -> JournalRecord:
        """Append ``entry`` to the journal, marked as this adapter's."""
        return await self.journal.append(entry.model_copy(update={ORIGIN_FIELD: self.name}))

    async def reply(self, address: Address, text: str) -> None:
        """Post a short notice (not tied to a journal entry) at ``address``.

        Tried once at once (a slash command's answer must come while it is handled); when the
        platform asks to wait or fails, the notice goes to the conversation's lane, which retries
        it without holding anything else. A refusal is logged (a channel's, once).
        """
        for part in format_block(Block("notice", text), self.platform.dialect):
            message = Outgoing(part, style="notice")
            try:
                await self.platform.post(address, message, None)
            except (RateLimited, Unavailable):
                self._enqueue(self._conversation_of(address), _Notice(address, message))
            except PlatformError as refused:
                if refused.refusal is Refusal.FATAL:
                    raise
                self._log_refusal(address, refused, "a notice")
                return

    def _conversation_of(self, address: Address) -> str:
        """The lane a notice at ``address`` queues in (a user-independent name is enough to order it)."""
        return self.mapping.conversation(address, User(id=""))

    def _log_refusal(self, address: Address, refused: PlatformError, what: str) -> None:
        """Log a refusal: a channel's once per channel (at warning), a message's each time."""
        if refused.refusal is Refusal.CHANNEL:
            where = f"{address.workspace}/{address.channel}/{address.thread}"
            level = logging.DEBUG if where in self._refused_channels else logging.WARNING
            self._refused_channels.add(where)
            log.log(
                level,
                "adapter %s: %s refuses the bot at %s (%s); %s was not shown. The adapter goes on",
                self.name,
                self.platform.name,
                clip(where, 120),
                clip(str(refused), 300),
                what,
            )
        else:
            log.warning("adapter %s: %s refused %s: %s", self.name, self.platform.name, what, clip(str(refused), 300))

    def state(self, conversation: str) -> ConversationState:
        """What this runner has seen of ``conversation``."""
        return self.states.setdefault(conversation, ConversationState())

    async def _command(self, command: Command, conversation: str, address: Address, user: User) -> None:
        state = self.state(conversation)
        match command.name:
            case "cancel":
                # Said before appending: the daemon's answer to the cancel must come after it.
                await self.reply(address, "cancel sent" if state.running else "nothing is running; cancel sent anyway")
                await self.append(CancelEntry(conversation=conversation, sender=user.label))
            case "new":
                await self.append(ResetEntry(conversation=conversation, sender=user.label))
                await self.reply(address, "new session: your next message starts a fresh Codex session")
            case "status":
                await self.reply(address, state.describe())
                if state.settings is None:  # (not seen since this adapter started: the daemon says them)
                    await self.append(SettingsEntry(conversation=conversation, sender=user.label))
            case "project" | "model" | "mode":
                # Said before appending: the daemon's answer must come after it.
                await self.reply(address, settings_sent(command))
                await self.append(settings_entry(command, conversation, user.label))
            case "approve" | "approve-session" | "deny":
                request_id = command.argument or (state.pending_approvals[0] if state.pending_approvals else "")
                if not request_id:
                    await self.reply(address, "no approval request is waiting in this conversation")
                    return
                decision = DECISIONS[command.name]
                await self.append(
                    ApprovalEntry(
                        conversation=conversation, sender=user.label, request_id=request_id, decision=decision
                    )
                )
                if request_id in state.pending_approvals:
                    state.pending_approvals.remove(request_id)
                await self.reply(address, f"{decision.replace('_', ' ')} sent for {clip(request_id, 80)}")
            case "details":
                await self._details(command.argument, conversation, address)
            case "resume":
                note = await settled(self.index)
                answer = resume_command(
                    self.threads,
                    command.argument,
                    conversation,
                    sender=user.label,
                    origin=self.name,
                    user_id=sender_id(self.platform.name, user.id),
                    admin=self.access.is_admin(user),
                )
                if answer.reset is not None:
                    await self.append(answer.reset)
                await self.reply(address, note + answer.reply)
            case "list":
                note = await settled(self.index)
                listed = self.index.listed(sender_id(self.platform.name, user.id))
                await self.reply(address, note + format_list(listed, self.place))
            case "history":
                count = parse_count(command.argument)
                if isinstance(count, str):
                    await self.reply(address, count)
                    return
                note = await settled(self.index)
                await self.reply(address, note + format_history(self.index.history(conversation, count), count))
            case "help":
                await self.reply(address, HELP)
            case _:
                await self.reply(
                    address,
                    f"unknown command {self.options.command_prefix}{clip(command.name, 40)};"
                    f" {self.options.command_prefix}help lists the commands",
                )

    def place(self, conversation: str) -> str:
        """Where ``conversation`` lives, for people: the platform's place when it is this adapter's, else its name."""
        address = self.mapping.address(conversation)
        if address is None or address.channel == conversation:
            return conversation  # not this adapter's, or named by its conversation (the console)
        if isinstance(self.platform, NamesPlaces):
            return self.platform.place(address)
        return f"channel {address.channel}" + (f", thread {address.thread}" if address.thread else "")

    async def _details(self, key_entry: str, conversation: str, address: Address) -> None:
        """The full output of a turn's tools (the card's **Details**; without an id, the latest turn's)."""
        card: Card | None = self._cards.find(key_entry) if key_entry else None
        if not key_entry:
            card = self._cards.get(conversation) or next(
                (c for c in reversed(self._cards.closed.values()) if c.conversation == conversation), None
            )
        if card is None or card.conversation != conversation:
            await self.reply(
                address,
                "the details of that turn are no longer kept here (the adapter keeps the last turns'"
                " while it runs); the journal has every tool's output",
            )
            return
        await self.reply(address, clip(card.details(), DETAILS_LIMIT))

    # ----------------------------------------------------------------- egress

    async def _egress(self) -> None:
        name = cursor_name(self.name)
        start = await self.journal.load_cursor(name) if self.options.resume else None
        if start is None:
            start = START if self.options.start == "beginning" else await self.journal.end_position()
            if self.options.history:
                await self.show_history(start)
            if self.options.resume:
                # Saved at once: an adapter killed before its first entry resumes here, not at a later end.
                await self.journal.save_cursor(name, start)
        self.index.begin_rebuild()  # rebuilt while the tail goes on; what the tail reads waits for it
        if self._group is not None:
            self._lane_tasks.append(self._group.create_task(self.index.rebuild(self.journal, start, self._mine)))
        else:
            await self.index.rebuild(self.journal, start, self._mine)
        self._saved = self._read_end = start
        self.ready.set()
        async for item in self.journal.tail(start):
            if isinstance(item, JournalRecord):
                address = self.mapping.address(item.entry.conversation)
                self.index.add(item.entry, mapped=address is not None)
                if address is not None:
                    if (
                        self.follows is not None
                        and address.thread
                        and not self.follows.followed(item.entry.conversation)
                    ):
                        await self.follows.follow(item.entry.conversation)
                    self._track(item.entry)
                    while len(self._outstanding) >= MAX_AHEAD:
                        self._room.clear()
                        await self._room.wait()
                    self._seq += 1
                    self._outstanding[self._seq] = item.start
                    self._enqueue(item.entry.conversation, _Entry(self._seq, item, address))
            elif isinstance(item, BadLine):
                log.debug("adapter %s: skipped bad journal line at %s", self.name, item.start)
            self._read_end = item.end
            self._progress.set()

    def _mine(self, conversation: str) -> bool:
        return self.mapping.address(conversation) is not None

    def _enqueue(self, conversation: str, item: _Entry | _Notice) -> None:
        """Queue ``item`` in ``conversation``'s lane, starting the lane's task when it has none."""
        lane = self._lanes.get(conversation)
        if lane is None:
            lane = self._lanes[conversation] = Lane(conversation)
            if self._group is not None:
                self._lane_tasks.append(self._group.create_task(self._lane(lane)))
        lane.items.append(item)
        lane.wake.set()

    async def _saver(self) -> None:
        """Save the cursor as far as every lane has delivered (and no open stream holds it back)."""
        name = cursor_name(self.name)
        while True:
            await self._progress.wait()
            self._progress.clear()
            if self._read_end is None or not self.options.resume:
                continue
            position = min(self._outstanding.values()) if self._outstanding else self._read_end
            hold = self._hold()
            if hold is not None:
                position = min(hold, position)
            if position != self._saved:
                await self.journal.save_cursor(name, position)
                self._saved = position

    async def _lane(self, lane: Lane) -> None:
        """Work through ``lane``: its entries in order, its streams' edits when due."""
        interval = self.platform.capabilities.edit_interval
        _LANE.set(lane)
        while True:
            due = self._next_edit(lane.conversation)
            card = self._cards.get(lane.conversation)
            if card is not None and (card.phase is not CardPhase.OPEN or not card.message_id):
                card = None  # nothing to edit: replayed, or not shown (yet)
            now = time.monotonic()
            if due is not None and due.wait(now, interval) == 0:
                await self._flush(due)
                continue
            if card is not None and card.due(now, interval) == 0:
                await self._flush_card(card, self._address_of_card(card))
                continue
            typing = self._typing_due(lane, now)
            if typing == 0 and lane.typing is not None:
                await self._typing(lane.typing, True)
                continue
            if lane.items:
                item = lane.items.popleft()
                lane.phase = LanePhase.DELIVERING
                hold = self._hold(lane.conversation)
                if isinstance(item, _Entry) and hold is not None:
                    # A stream this entry closes stops holding the cursor only once the entry is delivered.
                    self._outstanding[item.seq] = min(hold, item.record.start)
                try:
                    await self._work(lane, item)
                finally:
                    if isinstance(item, _Entry):
                        self._outstanding.pop(item.seq, None)
                        self._room.set()
                        self._progress.set()
                continue
            lane.phase = LanePhase.IDLE
            lane.wake.clear()
            waits = [] if due is None else [due.wait(now, interval)]
            waits += [] if card is None else [card.due(now, interval)]
            waits += [] if typing is None else [typing]
            timeout = min(waits, default=None)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await lane.wake.wait()

    async def _work(self, lane: Lane, item: _Entry | _Notice) -> None:
        if isinstance(item, _Notice):
            try:
                await self._call(self.platform.post, item.address, item.message, None)
            except PlatformError as refused:
                if refused.refusal is Refusal.FATAL:
                    raise
                self._log_refusal(item.address, refused, "a notice")
            return
        entry = item.record.entry
        try:
            await self._deliver(item.record, item.address)
        except PlatformError as refused:
            if refused.refusal is Refusal.FATAL:
                raise
            self._log_refusal(item.address, refused, f"entry {clip(entry.id or '', 40)} ({entry.kind})")

    def _hold(self, conversation: str | None = None) -> Position | None:
        """Where the cursor must stay: before the first delta of an open stream or the first step of an open card."""
        holds = (self._streams.hold(conversation), self._cards.hold(conversation))
        return min((hold for hold in holds if hold is not None), default=None)

    def _next_edit(self, conversation: str) -> Stream | None:
        """The open stream of ``conversation`` whose message has new text and may be edited soonest."""
        interval = self.platform.capabilities.edit_interval
        now = time.monotonic()
        pending = [
            s
            for s in self._streams.open
            if s.conversation == conversation and s.message_id is not None and s.text != s.shown
        ]
        return min(pending, key=lambda s: s.wait(now, interval), default=None)

    async def _flush(self, stream: Stream) -> None:
        """Edit ``stream``'s message to its text so far (a refusal is logged; the final reply follows)."""
        assert stream.message_id is not None
        source, message_id = stream.text, stream.message_id
        message = Outgoing(self._stream_text(source), final=False, buttons=CANCEL_BUTTONS, markdown=True)
        address = self._address_of(stream)
        try:
            await self._call(self.platform.edit, address, message_id, message)
        except PlatformError as refused:
            if refused.refusal is Refusal.FATAL:
                raise
            self._log_refusal(address, refused, "an edit of a streamed reply")
        stream.shown, stream.last_edit = source, time.monotonic()

    async def show_history(self, end: Position) -> None:
        """Show the last ``options.history`` entries before ``end`` of this adapter's conversations.

        They are shown as they were, without the ledger (a console shows its history on every start).
        """
        shown: list[tuple[Block, Address]] = []
        for item in await self.journal.read(START, end):
            if not isinstance(item, JournalRecord):
                continue
            address = self.mapping.address(item.entry.conversation)
            if address is None:
                continue
            self._track(item.entry)
            block = render_entry(
                item.entry,
                RenderOptions(self.options.render.show_reasoning, self.options.render.show_status, show_thoughts=True),
            )
            if block is not None:
                shown.append((block, address))
        for block, address in shown[-self.options.history :]:
            for text in format_block(block, self.platform.dialect):
                try:
                    message = Outgoing(text, style=block.style, markdown=block.markdown)
                    await self._call(self.platform.post, address, message, None)
                except PlatformError as refused:
                    _only_entry(refused)
                    self._log_refusal(address, refused, "an entry of the history")

    def _track(self, entry: BaseEntry) -> None:
        state = self.state(entry.conversation)
        match entry:
            case ThoughtEntry():
                state.queued += 1
            case StatusEntry():
                state.track_settings(entry)
                if entry.state not in (SESSION_RESET, THREAD_MOVED, SETTINGS_STATE):
                    state.thread_id = entry.thread_id or state.thread_id
                if entry.state == "turn_started":
                    state.running, state.queued = True, max(0, state.queued - 1)
                elif entry.state in TURN_ENDS:
                    state.running = False
                    state.usage = entry.usage if entry.usage is not None else state.usage
                elif entry.state in (SESSION_RESET, THREAD_MOVED):  # (its thread_id names the thread that left)
                    state.thread_id = None
            case ResponseEntry():
                state.thread_id = entry.thread_id or state.thread_id
            case ApprovalRequestEntry():
                if entry.request_id not in state.pending_approvals:
                    state.pending_approvals.append(entry.request_id)
            case ApprovalEntry():
                if entry.request_id in state.pending_approvals:
                    state.pending_approvals.remove(entry.request_id)
            case ResetEntry():
                state.thread_id = None

    async def _deliver(self, record: JournalRecord, address: Address) -> None:
        entry = record.entry
        assert entry.id is not None
        quiet = self.options.render.mode is RenderMode.QUIET
        if isinstance(entry, DeltaEntry):
            if not quiet:  # quiet: the reply comes whole, as a message of its own (the platform notifies)
                await self._delta(record, entry, address)
            return
        if isinstance(entry, StatusEntry) and entry.state == "turn_started":
            await self._close_card(entry.conversation, address, entry.ts, "ended")  # a turn that never said its end
            await self._typing(address, True)
        if isinstance(entry, ApprovalEntry) and await self._show_answer(entry):
            return  # the request's message says who decided what, and its buttons are off
        if getattr(entry, ORIGIN_FIELD, None) == self.name and self.platform.capabilities.echoes_own_messages:
            return  # the platform already shows what its user typed
        if quiet and is_step(entry, reasoning=self.options.render.show_reasoning):
            await self._card_step(record, address)
        elif isinstance(entry, ResponseEntry):
            stream = self._streams.response(entry.conversation, entry.text)
            await self._post_entry(entry, address, stream)
        elif isinstance(entry, FileEntry):
            await self._post_file(entry, address)
        else:
            block = render_entry(entry, self.options.render)
            if block is not None:
                await self._post_block(entry.id, block, address)
                if isinstance(entry, ApprovalRequestEntry):
                    self._remember_request(entry, block, address)
        if (isinstance(entry, StatusEntry) and entry.state in TURN_ENDS) or isinstance(entry, ErrorEntry):
            for stream in self._streams.end_turn(entry.conversation):
                await self._finish_stream(stream, address, stream.text)
            if not getattr(entry, "transient", False):  # Codex retries after a transient error: the turn goes on
                outcome = OUTCOMES.get(entry.state, "failed") if isinstance(entry, StatusEntry) else "failed"
                await self._close_card(entry.conversation, address, entry.ts, outcome)
            await self._typing(address, False)

    # ----------------------------------------------------------------- approvals answered in place

    def _remember_request(self, entry: ApprovalRequestEntry, block: Block, address: Address) -> None:
        """Keep where an approval request's buttons are (its last part), to update them once answered."""
        assert entry.id is not None
        texts = format_block(block, self.platform.dialect)
        known = self.ledger.get(delivery_key(entry.id, len(texts) - 1))
        if known is None or not known.message_id or not self.platform.capabilities.edits:
            return
        buttons = tuple(Button(action.label, action.command) for action in block.actions)
        message = Outgoing(texts[-1], style=block.style, buttons=buttons)
        self._asked[(entry.conversation, entry.request_id)] = _Asked(address, known.message_id, message)
        while len(self._asked) > MAX_AHEAD:
            self._asked.pop(next(iter(self._asked)))

    async def _show_answer(self, entry: ApprovalEntry) -> bool:
        """Show ``entry``'s answer on its request's message: who decided what, the buttons disabled.

        False when that message is not known here (then the answer is shown as a line of its own).
        """
        asked = self._asked.pop((entry.conversation, entry.request_id), None)
        if asked is None:
            return False
        dialect = self.platform.dialect
        said = dialect.styled("status", dialect.plain(f"{DECIDED[entry.decision]} by {clip(entry.sender, 80)}"))
        buttons = tuple(Button(b.label, b.action, disabled=True) for b in asked.message.buttons)
        message = Outgoing(f"{asked.message.text}\n{said}", style=asked.message.style, buttons=buttons)
        try:
            await self._call(self.platform.edit, asked.address, asked.message_id, message)
        except PlatformError as refused:
            if refused.refusal is Refusal.FATAL:
                raise
            self._log_refusal(asked.address, refused, "the answer shown on an approval request")
            return False
        return True

    # ----------------------------------------------------------------- the progress card (quiet)

    async def _card_step(self, record: JournalRecord, address: Address) -> None:
        """A step of the turn: onto the conversation's card (posted at its first step, edited later)."""
        entry = record.entry
        assert entry.id is not None
        card = self._cards.get(entry.conversation)
        if card is None:
            replayed = self.ledger.get(card_end_key(entry.id)) is not None  # closed before a restart
            card = self._cards.start(entry.conversation, entry.id, record.start, entry.ts, replayed=replayed)
        if card.phase is not CardPhase.OPEN:
            return
        card.add(entry, reasoning=self.options.render.show_reasoning)
        if card.message_id is None and self.platform.capabilities.edits:
            version = card.version
            card.message_id = await self._post(address, card_key(card.key_entry), self._card_message(card)) or ""
            card.shown_version, card.last_edit = version, time.monotonic()

    def _card_message(self, card: Card) -> Outgoing:
        """What ``card`` shows now, in the platform's dialect, with Cancel (open) or Details (closed)."""
        dialect = self.platform.dialect
        lines = card.lines(datetime.now(UTC) if card.phase is CardPhase.OPEN else card.ended or card.started)
        header = dialect.styled("status", dialect.plain(lines[0]))
        text = "\n".join([header, *(dialect.plain(line) for line in lines[1:])])
        limit = dialect.limit
        if limit is not None and len(text) > limit:
            text = text[: limit - 1] + "…"
        if card.phase is CardPhase.OPEN:
            return Outgoing(text, style="card", buttons=CANCEL_BUTTONS, final=False)
        return Outgoing(text, style="card", buttons=(Button("Details", f"details {card.key_entry}"),))

    def _address_of_card(self, card: Card) -> Address:
        address = self.mapping.address(card.conversation)
        assert address is not None
        return address

    async def _flush_card(self, card: Card, address: Address) -> None:
        """Edit ``card``'s message to what it shows now (a refusal is logged; the next edit tries again)."""
        assert card.message_id
        version, message = card.version, self._card_message(card)
        try:
            await self._call(self.platform.edit, address, card.message_id, message)
        except PlatformError as refused:
            if refused.refusal is Refusal.FATAL:
                raise
            self._log_refusal(address, refused, "an edit of a progress card")
        card.shown_version, card.last_edit = version, time.monotonic()

    async def _close_card(self, conversation: str, address: Address, at: datetime, outcome: str) -> None:
        """The turn ended: the card's last edit (or, where nothing can be edited, its only post)."""
        card = self._cards.get(conversation)
        if card is None:
            return
        if card.phase is CardPhase.OPEN:
            card.close(at, outcome)
            if card.message_id is None:  # a platform that cannot edit: the card once, now
                card.message_id = await self._post(address, card_key(card.key_entry), self._card_message(card)) or ""
            elif card.message_id:
                wait = card.due(time.monotonic(), self.platform.capabilities.edit_interval)
                if wait:
                    await asyncio.sleep(wait)
                await self._flush_card(card, address)
            await self.ledger.done(card_end_key(card.key_entry), card.message_id)
        self._cards.finish(card)

    def _typing_due(self, lane: Lane, now: float) -> float | None:
        """Seconds until ``lane``'s typing indicator is shown again (None: not to be refreshed)."""
        refresh = self.platform.capabilities.typing_refresh
        if lane.typing is None or refresh is None:
            return None
        if now - lane.typing_since > TYPING_LIMIT:
            lane.typing = None
            return None
        return max(0.0, lane.typing_at + refresh - now)

    async def _typing(self, address: Address, active: bool) -> None:
        """The typing indicator: shown when the platform takes it, never waited for or retried.

        On a platform whose indicator fades by itself (``Capabilities.typing_refresh``) the lane
        shows it again until the turn ends.
        """
        lane = _LANE.get()
        if lane is not None:
            now = time.monotonic()
            if active and lane.typing is None:
                lane.typing_since = now
            lane.typing, lane.typing_at = (address if active else None), now
        try:
            await self.platform.typing(address, active)
        except (RateLimited, Unavailable) as failed:
            log.debug("adapter %s: the typing indicator was not shown: %s", self.name, failed)
        except PlatformError as refused:
            if refused.refusal is Refusal.FATAL:
                raise
            log.debug("adapter %s: the typing indicator was refused: %s", self.name, refused)

    async def _delta(self, record: JournalRecord, entry: DeltaEntry, address: Address) -> None:
        assert entry.id is not None
        stream = self._streams.delta(entry.conversation, entry.item_id, entry.id, record.start, entry.text)
        if stream is None or stream.message_id is not None:
            return
        if self.ledger.get(delivery_key(stream.key_entry, "end")) is not None:
            self._streams.close(stream)  # delivered whole before a restart
            return
        if self.ledger.get(delivery_key(stream.key_entry, 0)) is None and self._streams.echo(stream) != "no":
            return  # perhaps a late echo of a reply already shown: more text (or its end) decides
        source = stream.text
        stream.message_id = await self._post(
            address,
            delivery_key(stream.key_entry, 0),
            Outgoing(self._stream_text(source), final=False, buttons=CANCEL_BUTTONS, markdown=True),
        )
        stream.shown, stream.last_edit = source, time.monotonic()

    def _stream_text(self, text: str) -> str:
        limit = self.platform.dialect.limit
        texts = format_block(Block("response", text, markdown=True, label="codex:"), self.platform.dialect)
        shown = texts[0] if texts else ""
        if limit is None or len(texts) == 1:
            return shown
        return shown[: max(0, limit - 2)] + " …"  # the rest follows in more messages with the final reply

    def _address_of(self, stream: Stream) -> Address:
        address = self.mapping.address(stream.conversation)
        assert address is not None
        return address

    async def _post_entry(self, entry: ResponseEntry, address: Address, stream: Stream | None) -> None:
        assert entry.id is not None
        if stream is None or stream.message_id is None:
            block = render_entry(entry, self.options.render)
            assert block is not None
            await self._post_block(entry.id, block, address)
            return
        await self._finish_stream(stream, address, entry.text, entry.id)

    async def _finish_stream(self, stream: Stream, address: Address, text: str, entry_id: str | None = None) -> None:
        """Replace a streamed message with the whole reply (more parts posted after it when long)."""
        if stream.message_id is None:
            return
        texts = format_block(Block("response", text, markdown=True, label="codex:"), self.platform.dialect)
        wait = stream.wait(time.monotonic(), self.platform.capabilities.edit_interval)
        if wait and text != stream.shown:
            await asyncio.sleep(wait)
        message_id = stream.message_id
        final = Outgoing(texts[0], markdown=True)
        try:
            await self._call(self.platform.edit, address, message_id, final)
        except PlatformError as refused:
            if refused.refusal is not Refusal.ENTRY:
                raise
            await self._fall_back(address, delivery_key(stream.key_entry, "final"), final, refused)
        stream.shown, stream.last_edit = text, time.monotonic()
        parts_of = entry_id or stream.key_entry
        if entry_id is not None:
            await self.ledger.done(delivery_key(entry_id, 0), stream.message_id)
        for index, part in enumerate(texts[1:], start=1):
            await self._post(address, delivery_key(parts_of, index), Outgoing(part, markdown=True))
        await self.ledger.done(delivery_key(stream.key_entry, "end"), stream.message_id)

    async def _post_block(self, entry_id: str, block: Block, address: Address) -> None:
        buttons = tuple(Button(action.label, action.command) for action in block.actions)
        texts = format_block(block, self.platform.dialect)
        for index, text in enumerate(texts):
            last = index == len(texts) - 1
            await self._post(
                address,
                delivery_key(entry_id, index),
                Outgoing(text, style=block.style, buttons=buttons if last else (), markdown=block.markdown),
            )

    async def _post_file(self, entry: FileEntry, address: Address) -> None:
        """Upload a ``file`` entry's file with its caption, exactly once; refused (by the platform, or the
        file itself), one notice says so instead (files out, docs/adapters.md)."""
        assert entry.id is not None
        key = delivery_key(entry.id, 0)
        try:
            upload = upload_of(entry)
            text = format_block(Block("file", caption_of(entry, upload)), self.platform.dialect)[0]
            await self._post_once(address, key, Outgoing(text, style="file", file=upload))
        except PlatformError as refused:
            if refused.refusal is not Refusal.ENTRY:
                raise
            log.warning("adapter %s: a file was not sent: %s; a notice says so", self.name, clip(str(refused), 300))
            text = f"{self.platform.name} did not take a file Codex sent ({clip(str(refused), 200)}); it is left out"
            notice = Outgoing(format_block(Block("notice", text), self.platform.dialect)[0], style="notice")
            try:
                await self._post_once(address, delivery_key(key, "refused"), notice)
            except PlatformError as again:
                _only_entry(again)
                log.warning("adapter %s: the notice was refused too: %s", self.name, clip(str(again), 300))

    async def _post(self, address: Address, key: str, message: Outgoing) -> str | None:
        """Post ``message`` under ``key`` exactly once; its message id, None when it was refused.

        A refused message (:attr:`Refusal.ENTRY`) is tried as plain text, then in smaller parts,
        then replaced by one notice saying so (:meth:`_fall_back`); other refusals propagate.
        """
        try:
            return await self._post_once(address, key, message)
        except PlatformError as refused:
            if refused.refusal is not Refusal.ENTRY:
                raise
            return await self._fall_back(address, key, message, refused)

    async def _fall_back(self, address: Address, key: str, message: Outgoing, refused: PlatformError) -> str | None:
        """The documented fallback for a refused message: plain text, smaller parts, then one notice.

        Each try has a key of its own derived from ``key``, so a restart repeats none of them.
        """
        dialect = self.platform.dialect
        # Markdown laid out by the platform's own facility: the same text in its plain layout first.
        text = message.text if message.markdown else dialect.plain(message.text)
        plain = Outgoing(text, style=message.style, buttons=message.buttons, final=message.final)
        if plain != message:
            try:
                return await self._post_once(address, delivery_key(key, "plain"), plain)
            except PlatformError as again:
                _only_entry(again)
        limit = min(SMALL_PART, dialect.limit or SMALL_PART)
        parts = [part.text for part in split_message(message.text, limit)]
        if len(parts) > 1:
            try:
                first: str | None = None
                for index, part in enumerate(parts):
                    last = index == len(parts) - 1
                    small = Outgoing(dialect.plain(part), style=message.style, buttons=message.buttons if last else ())
                    posted = await self._post_once(address, delivery_key(key, f"small {index}"), small)
                    first = first or posted
                return first
            except PlatformError as again:
                _only_entry(again)
        log.warning(
            "adapter %s: %s refused a message, also as plain text and in smaller parts: %s; a notice says so",
            self.name,
            self.platform.name,
            clip(str(refused), 300),
        )
        text = f"{self.platform.name} refused to show a message here ({clip(str(refused), 200)}); it is left out"
        notice = Outgoing(format_block(Block("notice", text), dialect)[0], style="notice")
        try:
            await self._post_once(address, delivery_key(key, "refused"), notice)
        except PlatformError as again:
            _only_entry(again)
            log.warning("adapter %s: the notice was refused too: %s", self.name, clip(str(again), 300))
        return None

    async def _post_once(self, address: Address, key: str, message: Outgoing) -> str:
        """Post ``message`` under ``key`` exactly once (see :mod:`~coven_codex.adapters.kit.ledger`).

        When the platform fails (:class:`Unavailable`) the post may have landed: it is looked up
        (:meth:`Platform.find`) before every new try, and tried again with backoff, never skipped.
        """
        tries = 0
        while True:
            known = self.ledger.get(key)
            if known is not None and known.message_id is not None:
                return known.message_id
            if known is not None and self.platform.capabilities.can_find:
                found = await self._call(self.platform.find, address, key)
                if (
                    found is None
                    and known.at is not None
                    and known.digest
                    and isinstance(self.platform, FindsByContent)
                ):
                    # Past the platform's window for ``find`` (Discord's nonce): the bot's own messages
                    # since the intent with the same text, not already another key's.
                    candidates = await self._call(self.platform.find_by_content, address, known.at, known.digest)
                    found = next((c for c in candidates if not self.ledger.taken(c)), None)
                if found is not None:
                    await self.ledger.done(key, found)
                    return found
            await self.ledger.intend(key, content_digest(message.text))
            try:
                message_id = await self._attempt(self.platform.post, address, message, key)
            except Unavailable as failed:
                await self._back_off(failed, tries)
                tries += 1
                continue
            await self.ledger.done(key, message_id)
            return message_id

    async def _call(self, operation: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run a platform call until it answers: rate limits waited out, failures retried with backoff."""
        tries = 0
        while True:
            try:
                return await self._attempt(operation, *args, **kwargs)
            except Unavailable as failed:
                await self._back_off(failed, tries)
                tries += 1

    async def _back_off(self, failed: Unavailable, tries: int) -> None:
        """Wait before the next try of a call the platform failed (this conversation only)."""
        wait = BACKOFF[min(tries, len(BACKOFF) - 1)]
        log.log(
            logging.DEBUG if self._unavailable else logging.WARNING,
            "adapter %s: %s failed (%s); trying again in %.1f s (nothing is skipped; further failures"
            " are logged at debug level)",
            self.name,
            self.platform.name,
            clip(str(failed), 200),
            wait,
        )
        self._unavailable = True
        await self._wait(wait)

    async def _attempt(self, operation: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run a platform call, waiting out rate limits (the first wait is reported, the rest logged at debug)."""
        limited_before = False
        while True:
            try:
                result = await operation(*args, **kwargs)
            except PlatformError:
                self._answered("refused")
                raise
            except RateLimited as limited:
                self._answered("rate_limited")
                limited_before = True
                wait = min(limited.retry_after, MAX_RETRY_AFTER)
                level = logging.DEBUG if self._waiting else logging.WARNING
                log.log(
                    level,
                    "adapter %s: %s rate-limits us; waiting %.1f s and trying again (nothing is"
                    " dropped; further waits are logged at debug level)",
                    self.name,
                    self.platform.name,
                    wait,
                )
                self._waiting = True
                await self._wait(wait)
                continue
            self._answered("retried" if limited_before else "ok")
            return result

    async def _wait(self, seconds: float) -> None:
        """Sleep ``seconds`` in the calling lane (marked as waiting meanwhile)."""
        lane = _LANE.get()
        if lane is not None:
            lane.phase = LanePhase.WAITING
        try:
            await asyncio.sleep(seconds)
        finally:
            if lane is not None:
                lane.phase = LanePhase.DELIVERING

    def _answered(self, answer_class: str) -> None:
        if self.instruments is not None:
            self.instruments.platform_answers.labels(answer_class=answer_class).inc()
