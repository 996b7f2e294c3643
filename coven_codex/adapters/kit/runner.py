"""The adapter loop: tail the journal for the adapter's conversations and drive a :class:`Platform`.

:class:`AdapterRunner` runs three tasks under one task group:

- **egress** follows the journal from the adapter's saved cursor (``adapter <name>``), renders
  every entry of its conversations (:mod:`~coven_codex.adapters.kit.render`), splits it at the
  dialect's limit and posts it through the :mod:`~coven_codex.adapters.kit.ledger` (exactly once);
  ``delta`` entries grow one streamed message per reply (:mod:`~coven_codex.adapters.kit.streaming`)
  that the final ``response`` replaces; ``turn_started``/turn ends switch the typing indicator.
  The cursor is saved after each entry, but never past the first delta of a stream still open;
- **flusher** edits streamed messages when they have new text, at most once per
  ``capabilities.edit_interval`` each;
- **ingress** takes what users do (:meth:`Platform.incoming`), checks access, runs commands and
  appends ``thought`` entries. When the platform's incoming stream ends, the runner stops.

Every platform call that raises :class:`RateLimited` is retried after the time it asks for (at
most :data:`MAX_RETRY_AFTER` per wait); nothing is dropped, and the wait is logged once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, ParamSpec, TypeVar

from coven_codex.adapters.kit.access import AccessPolicy
from coven_codex.adapters.kit.commands import HELP, Command, ConversationState, parse_command
from coven_codex.adapters.kit.ledger import DeliveryLedger, delivery_key
from coven_codex.adapters.kit.mapping import ConversationMap
from coven_codex.adapters.kit.platform import (
    Address,
    Button,
    ButtonPress,
    Incoming,
    IncomingMessage,
    Outgoing,
    Platform,
    PlatformError,
    RateLimited,
    User,
)
from coven_codex.adapters.kit.render import Block, RenderOptions, clip, format_block, render_entry
from coven_codex.adapters.kit.streaming import Stream, Streams
from coven_codex.entries import (
    ApprovalEntry,
    ApprovalRequestEntry,
    BaseEntry,
    CancelEntry,
    DeltaEntry,
    ErrorEntry,
    ResetEntry,
    ResponseEntry,
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
TURN_ENDS = frozenset({"turn_completed", "turn_aborted", "turn_failed"})
SESSION_RESET = "session_reset"
"""The daemon's answer to a ``reset``: the thread it names has ended."""
ORIGIN_FIELD = "origin"
"""Extra field the runner puts on the entries it appends: ``<adapter name>``."""

CANCEL_BUTTONS = (Button("Cancel", "cancel"),)
"""The button a reply being streamed carries; the final reply has none."""

T = TypeVar("T")
P = ParamSpec("P")


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
    ) -> None:
        """``metrics``: serve ``/metrics``, ``/healthz``, ``/readyz`` while running (docs/operations.md)."""
        self.journal = journal
        self.platform = platform
        self.mapping = mapping
        self.access = access
        self.ledger = ledger
        self.name = name
        self.options = options
        self.states: dict[str, ConversationState] = {}
        self._streams = Streams()
        self._dirty = asyncio.Event()
        self._lock = asyncio.Lock()
        self._saved: Position | None = None
        self._waiting = False
        self.ready = asyncio.Event()
        """Set once the runner follows the journal (history, if any, shown)."""
        self.metrics = metrics
        self.instruments = Instruments() if metrics is not None else None
        self._reading_platform = False

    async def run(self) -> None:
        """Follow the journal and the platform until the platform's incoming stream ends."""
        described = self.access.describe()
        log.log(logging.WARNING if self.access.allows_nobody else logging.INFO, "adapter %s: %s", self.name, described)
        async with contextlib.AsyncExitStack() as stack, asyncio.TaskGroup() as group:
            await self._serve_metrics(stack)
            egress = group.create_task(self._egress())
            flusher = group.create_task(self._flusher())
            try:
                self._reading_platform = True
                async for event in self.platform.incoming():
                    await self.handle(event)
            finally:
                self._reading_platform = False
                egress.cancel()
                flusher.cancel()

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
        """Act on one thing a user did: refuse it, run a command, or append a thought."""
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
        """Post a short notice (not tied to a journal entry) at ``address``."""
        for part in format_block(Block("notice", text), self.platform.dialect):
            await self._call(self.platform.post, address, Outgoing(part, style="notice"), None)

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
            case "approve" | "deny":
                request_id = command.argument or (state.pending_approvals[0] if state.pending_approvals else "")
                if not request_id:
                    await self.reply(address, "no approval request is waiting in this conversation")
                    return
                decision: Literal["approve", "deny"] = "approve" if command.name == "approve" else "deny"
                await self.append(
                    ApprovalEntry(
                        conversation=conversation, sender=user.label, request_id=request_id, decision=decision
                    )
                )
                if request_id in state.pending_approvals:
                    state.pending_approvals.remove(request_id)
                await self.reply(address, f"{decision} sent for {clip(request_id, 80)}")
            case "help":
                await self.reply(address, HELP)
            case _:
                await self.reply(
                    address,
                    f"unknown command {self.options.command_prefix}{clip(command.name, 40)};"
                    f" {self.options.command_prefix}help lists the commands",
                )

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
        self._saved = start
        self.ready.set()
        async for item in self.journal.tail(start):
            if isinstance(item, JournalRecord):
                address = self.mapping.address(item.entry.conversation)
                if address is not None:
                    self._track(item.entry)
                    try:
                        await self._deliver(item, address)
                    except PlatformError as refused:
                        log.error(
                            "adapter %s: %s refused to show entry %s (%s): %s; it is skipped",
                            self.name,
                            self.platform.name,
                            clip(item.entry.id or "", 40),
                            item.entry.kind,
                            clip(str(refused), 300),
                        )
            elif isinstance(item, BadLine):
                log.debug("adapter %s: skipped bad journal line at %s", self.name, item.start)
            hold = self._streams.hold()
            position = item.end if hold is None else min(hold, item.end)
            if position != self._saved and self.options.resume:
                await self.journal.save_cursor(name, position)
                self._saved = position

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
                await self._call(self.platform.post, address, Outgoing(text, style=block.style), None)

    def _track(self, entry: BaseEntry) -> None:
        state = self.state(entry.conversation)
        match entry:
            case ThoughtEntry():
                state.queued += 1
            case StatusEntry():
                if entry.state != SESSION_RESET:
                    state.thread_id = entry.thread_id or state.thread_id
                if entry.state == "turn_started":
                    state.running, state.queued = True, max(0, state.queued - 1)
                elif entry.state in TURN_ENDS:
                    state.running = False
                    state.usage = entry.usage if entry.usage is not None else state.usage
                elif entry.state == SESSION_RESET:  # (its thread_id names the thread that ended)
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
        if isinstance(entry, DeltaEntry):
            await self._delta(record, entry, address)
            return
        if isinstance(entry, StatusEntry) and entry.state == "turn_started":
            await self._call(self.platform.typing, address, True)
        if getattr(entry, ORIGIN_FIELD, None) == self.name and self.platform.capabilities.echoes_own_messages:
            return  # the platform already shows what its user typed
        if isinstance(entry, ResponseEntry):
            async with self._lock:
                stream = self._streams.response(entry.conversation, entry.text)
                await self._post_entry(entry, address, stream)
        else:
            block = render_entry(entry, self.options.render)
            if block is not None:
                await self._post_block(entry.id, block, address)
        if (isinstance(entry, StatusEntry) and entry.state in TURN_ENDS) or isinstance(entry, ErrorEntry):
            async with self._lock:
                for stream in self._streams.end_turn(entry.conversation):
                    await self._finish_stream(stream, address, stream.text)
            await self._call(self.platform.typing, address, False)

    async def _delta(self, record: JournalRecord, entry: DeltaEntry, address: Address) -> None:
        assert entry.id is not None
        async with self._lock:
            stream = self._streams.delta(entry.conversation, entry.item_id, entry.id, record.start, entry.text)
            if stream is None or stream.message_id is not None:
                self._dirty.set()
                return
            if self.ledger.get(delivery_key(stream.key_entry, "end")) is not None:
                self._streams.close(stream)  # delivered whole before a restart
                return
            source = stream.text
            stream.message_id = await self._post(
                address,
                delivery_key(stream.key_entry, 0),
                Outgoing(self._stream_text(source), final=False, buttons=CANCEL_BUTTONS),
            )
            stream.shown, stream.last_edit = source, time.monotonic()

    def _stream_text(self, text: str) -> str:
        limit = self.platform.dialect.limit
        texts = format_block(Block("response", text, markdown=True, label="codex:"), self.platform.dialect)
        shown = texts[0] if texts else ""
        if limit is None or len(texts) == 1:
            return shown
        return shown[: max(0, limit - 2)] + " …"  # the rest follows in more messages with the final reply

    async def _flusher(self) -> None:
        interval = self.platform.capabilities.edit_interval
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            while True:
                now = time.monotonic()
                pending = [s for s in self._streams.open if s.message_id is not None and s.text != s.shown]
                if not pending:
                    break
                stream = min(pending, key=lambda s: s.wait(now, interval))
                await asyncio.sleep(stream.wait(now, interval))
                async with self._lock:
                    if stream in self._streams.open and stream.message_id is not None and stream.text != stream.shown:
                        source, message_id = stream.text, stream.message_id
                        message = Outgoing(self._stream_text(source), final=False, buttons=CANCEL_BUTTONS)
                        await self._call(self.platform.edit, self._address_of(stream), message_id, message)
                        stream.shown, stream.last_edit = source, time.monotonic()

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
        await self._call(self.platform.edit, address, message_id, Outgoing(texts[0]))
        stream.shown, stream.last_edit = text, time.monotonic()
        parts_of = entry_id or stream.key_entry
        if entry_id is not None:
            await self.ledger.done(delivery_key(entry_id, 0), stream.message_id)
        for index, part in enumerate(texts[1:], start=1):
            await self._post(address, delivery_key(parts_of, index), Outgoing(part))
        await self.ledger.done(delivery_key(stream.key_entry, "end"), stream.message_id)

    async def _post_block(self, entry_id: str, block: Block, address: Address) -> None:
        buttons = tuple(Button(action.label, action.command) for action in block.actions)
        texts = format_block(block, self.platform.dialect)
        for index, text in enumerate(texts):
            last = index == len(texts) - 1
            await self._post(
                address,
                delivery_key(entry_id, index),
                Outgoing(text, style=block.style, buttons=buttons if last else ()),
            )

    async def _post(self, address: Address, key: str, message: Outgoing) -> str:
        """Post ``message`` under ``key`` exactly once (see :mod:`~coven_codex.adapters.kit.ledger`)."""
        known = self.ledger.get(key)
        if known is not None and known.message_id is not None:
            return known.message_id
        if known is not None and self.platform.capabilities.can_find:
            found = await self._call(self.platform.find, address, key)
            if found is not None:
                await self.ledger.done(key, found)
                return found
        await self.ledger.intend(key)
        message_id = await self._call(self.platform.post, address, message, key)
        await self.ledger.done(key, message_id)
        return message_id

    async def _call(self, operation: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
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
                await asyncio.sleep(wait)
                continue
            self._answered("retried" if limited_before else "ok")
            return result

    def _answered(self, answer_class: str) -> None:
        if self.instruments is not None:
            self.instruments.platform_answers.labels(answer_class=answer_class).inc()
