"""Rollout records → chat entries (docs/journal-protocol.md).

Sources of truth (each reply exactly once, see ``docs/rollout.md``):

- assistant text: the *event* (0.47 ``event_msg/agent_message``, 0.169 ``event_msg/
  item_completed`` with an ``AgentMessage``); the duplicate ``response_item/message`` with
  ``role: assistant`` is ignored. Events are written even when the turn then fails.
- reasoning: the event likewise (``agent_reasoning`` / ``Reasoning`` item).
- tool calls and results: ``response_item`` ``function_call`` / ``function_call_output``
  (both versions), paired by ``call_id``; 0.169's ``McpToolCall`` / ``CommandExecution``
  events only mark the call failed.
- turn lifecycle: ``task_started`` → ``turn_started``; ``task_complete`` → ``turn_completed``,
  or an ``error`` entry plus ``turn_failed`` when it carries an error; ``turn_aborted``.
  0.47 records no turn events: its ``user_message`` event yields ``turn_started`` and it
  never records the end of a normal turn (the driver sees the process end); interrupted
  turns end with ``turn_aborted`` in both versions.
- the user's own prompt is never echoed.
- other releases (``docs/rollout.md``, "Rollouts of other Codex releases"): plans, web
  searches, compactions, a user's ``!command``, review verdicts, images and the events code
  mode leaves as the only record of a call become ``activity`` (or tool) entries; a turn left
  without an end is closed (``turn_aborted``) when the next starts; a fork's embedded parent
  history gives nothing; a file of the old format gives one ``VERSION`` error; ``ts`` never
  goes back. A generated image's base64 ``result`` is handed on (``keep_images``,
  :meth:`RolloutTranslator.take_images`) for the egress to send as a ``file`` entry.

Entry ids are ``f"{thread_id}:{line_start}:{index}"``: feeding the same file again from
offset 0 gives the same entries with the same ids (and the same ``ts``: each entry takes
its line's timestamp, or the previous line's when it has none; entries before the first
timestamped line take the thread's creation time from its UUIDv7 id, else the Unix epoch). The
state carried between lines is the ``call_id`` → tool name map, the failed call ids, whether turn events were seen, the
open turn and its calls without a result, the current turn id, the file's own thread id and
whether it is a fork, the last timestamp, the user messages counted, the thought the current
turn answers (``in_reply_to`` on each entry of the turn, from the ``reply_to`` lookup) and the
thread's token usage (``token_count``) now and at the turn's start (``usage`` on the turn's end).

Fast path: lines whose envelope (read without decoding) says they carry nothing for the
chat are skipped undecoded unless ``decode_all`` is set; such a line is still reported as
an error when it is visibly torn (does not end with ``}``).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from coven_codex.entries import (
    ActivityEntry,
    BaseEntry,
    ErrorEntry,
    ReasoningEntry,
    ResponseEntry,
    StatusEntry,
    TokenUsage,
    ToolCallEntry,
    ToolResultEntry,
)
from coven_codex.rollout.activities import USER_SHELL_PREFIX
from coven_codex.rollout.error_entries import error_entry_from_message
from coven_codex.rollout.parser import ENVELOPE_PATTERN, parse_line
from coven_codex.rollout.records import (
    ActivityRecord,
    AgentMessageEvent,
    AgentReasoningEvent,
    ErrorMessageEvent,
    McpCallEndEvent,
    RolloutRecord,
    SessionMeta,
    TokenCountEvent,
    ToolCallCompletedEvent,
    ToolCallItem,
    ToolOutputItem,
    TurnAbortedEvent,
    TurnCompleteEvent,
    TurnContext,
    TurnStartedEvent,
    UserMessageEvent,
)
from coven_codex.rollout.tool_output import clean_tool_output
from coven_codex.tailing import Line

log = logging.getLogger(__name__)

TURN_STARTED = "turn_started"
TURN_COMPLETED = "turn_completed"
TURN_FAILED = "turn_failed"
TURN_ABORTED = "turn_aborted"
TURN_END_STATES: frozenset[str] = frozenset({TURN_COMPLETED, TURN_FAILED, TURN_ABORTED})

ReplyLookup = Callable[[int, str | None, str], str | None]
"""``(ordinal, client_id, text)`` of a user message Codex recorded → the id of the thought it is
(``None``: not known). ``ordinal`` counts the thread's user messages from 0; on a turn's start,
before its message is recorded, it is called with the next ordinal, ``None`` and ``""``."""

USAGE_FIELDS = ("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens", "total_tokens")


def turn_entry_id(scope: str, turn: str, what: str) -> str:
    """The id of a turn's ``error`` (``what = "error"``) or its end ``status`` (``what = "end"``).

    Derived from the thread (``scope``) and the turn, not from where it is written, so the
    entry has one id whoever writes it: egress from the rollout (``task_complete``,
    ``turn_aborted``) or the session from the driver's report; the journal gets it once.
    """
    return f"{scope}:turn-{turn.replace(':', '%3A')}:{what}"


BAD_LINE_CODE = "BAD_LINE"
UNSUPPORTED_FORMAT_CODE = "VERSION"
"""The code of the one error a rollout in the old format (no envelope) gets."""
NO_END_REASON = "no_end_recorded"
"""``reason`` of the ``turn_aborted`` the translator adds for a turn whose end Codex never wrote."""

SKIPPED_ENVELOPES: frozenset[tuple[str, str | None]] = frozenset(
    {
        ("turn_context", None),
        ("world_state", None),
        ("token_usage_record", None),
        ("response_item", "message"),
        ("response_item", "reasoning"),
        ("event_msg", "thread_settings_applied"),
    }
)
"""Envelopes that never produce an entry: skipped without decoding on the fast path."""

_SKIPPED_RAW: frozenset[tuple[bytes, bytes | None]] = frozenset(
    (kind.encode(), None if payload_type is None else payload_type.encode()) for kind, payload_type in SKIPPED_ENVELOPES
)
_TURN_CONTEXT_RAW = b"turn_context"
_TURN_ID_FIRST = re.compile(rb'\{"turn_id":"([^"\\]*)"')
"""A ``turn_context`` payload as Codex writes it from 0.104 on: its turn id first. The fast path
reads the id from the bytes; the rest of the line (instructions, policies: kilobytes) is not
decoded."""
_USER_SHELL_RAW = USER_SHELL_PREFIX.encode()
"""A ``response_item/message`` holding this is a user's ``!command`` (an activity): decoded."""


@dataclass(frozen=True, slots=True)
class GeneratedImage:
    """An image Codex generated (``response_item/image_generation_call``), handed on by a translator
    made with ``keep_images``: the fields of the ``file`` entry it becomes (the activity's line, index
    1) and the image as Codex recorded it, base64 and undecoded
    (:mod:`coven_codex.attachments.generated` checks and decodes it)."""

    entry_id: str
    conversation: str
    ts: datetime
    in_reply_to: str | None
    thread_id: str
    turn_id: str | None
    call_id: str | None
    prompt: str
    result: str


_REPEATS_A_CALL = frozenset({"patch", "subagent"})
"""Activities whose event repeats a tool call shown with the same ``call_id`` (then skipped)."""
IMAGE_ACTIVITY = "image"
"""The activity of a generated image (``response_item/image_generation_call``)."""

TEXT_PREVIEW = 200
RECORD_START = b'{"timestamp":"'
"""How every line Codex writes begins."""


class RolloutTranslator:
    """Translates one thread's rollout lines, in file order, into chat entries."""

    def __init__(
        self,
        conversation: str,
        thread_id: str,
        *,
        decode_all: bool = False,
        reply_to: ReplyLookup | None = None,
        keep_images: bool = False,
    ) -> None:
        self.conversation = conversation
        self.thread_id = thread_id
        self._keep_images = keep_images
        self._images: list[GeneratedImage] = []
        """Images generated on the lines fed since the last :meth:`take_images` (``keep_images`` only)."""
        self._decode_all = decode_all
        self._lookup = reply_to
        self._user_messages = 0
        """User messages recorded so far (the event form)."""
        self._reply_to: str | None = None
        """The thought the current turn answers: every entry carries it as ``in_reply_to``."""
        self._usage_total: dict[str, Any] | None = None
        """The thread's token usage so far (the newest ``token_count``)."""
        self._usage_at_turn_start: dict[str, Any] | None = None
        self._tool_names: dict[str, str] = {}
        self._failed_calls: set[str] = set()
        self._saw_turn_events = False
        self._ended_turns: set[str] = set()
        """Turns whose end was translated: a turn ends once (a repeated end line gives nothing)."""
        self._turn_open = False
        """Whether the turn started by the last ``task_started`` has not ended yet."""
        self._open_turn_id: str | None = None
        """That turn's id (None when Codex gave none)."""
        self._current_turn_id: str | None = None
        """The turn the lines now belong to (``task_started`` / ``turn_context``), for entries whose
        record carries no turn id."""
        self._open_calls: dict[str, str] = {}
        """Tool calls of the open turn without a result yet: call id → tool."""
        self._own_thread: str | None = None
        """The thread id of the file's first ``session_meta``."""
        self._fork = False
        """The file is a fork (``forked_from_id``, or another thread's ``session_meta`` in it)."""
        self._inherited_turn = False
        """The lines now belong to a turn of the parent's history a fork embeds."""
        self._legacy_file = False
        """The file's first line is a record of the old format (see :meth:`_unsupported_format`)."""
        self._last_timestamp_text: str | None = None
        self._parsed_timestamp_text: str | None = None
        self._parsed_timestamp: datetime | None = None
        self._handlers: dict[type, Callable[[RolloutRecord], list[BaseEntry]]] = {
            AgentMessageEvent: self._agent_message,
            AgentReasoningEvent: self._agent_reasoning,
            ToolCallItem: self._tool_call_item,
            ToolOutputItem: self._tool_output_item,
            ToolCallCompletedEvent: self._tool_call_completed,
            TurnStartedEvent: self._turn_started,
            UserMessageEvent: self._user_message,
            TurnCompleteEvent: self._turn_complete,
            TurnAbortedEvent: self._turn_aborted,
            ErrorMessageEvent: self._error_event,
            TokenCountEvent: self._token_count,
            TurnContext: self._turn_context,
            ActivityRecord: self._activity,
            McpCallEndEvent: self._mcp_call_end,
        }

    # -- input ----------------------------------------------------------------------------
    def feed(self, line: Line) -> list[BaseEntry]:
        """Entries for one complete line from the tailer."""
        if line.too_long:
            return [self._bad_line(line.start, "the line is longer than the tailer's limit and was skipped")]
        return self.feed_bytes(line.data, line.start)

    def feed_bytes(self, data: bytes, start: int) -> list[BaseEntry]:
        """Entries for one line (without its newline) starting at byte ``start``.

        A line that does not decode but holds a second record start (``{"timestamp":"``) is
        what Codex leaves when it was killed mid-write and a resumed run appended after the
        torn bytes: the torn part is reported, the record after it is still translated (its
        entries' ids use the byte offset where it starts).
        """
        if not self._decode_all:
            envelope = ENVELOPE_PATTERN.match(data)  # same test as peek_envelope, without decoding names
            if (
                envelope is not None
                and envelope.group(1, 2) in _SKIPPED_RAW
                and data.find(RECORD_START, 1) == -1
                and _USER_SHELL_RAW not in data
            ):
                if not (data.endswith(b"}") or data.rstrip().endswith(b"}")):  # rstrip copies: only if needed
                    return [self._bad_line(start, "torn line (it does not end with '}')")]
                if envelope.group(1) == _TURN_CONTEXT_RAW:
                    return self._turn_context_fast(data, envelope.end(), start)
                return []
        parsed = parse_line(data, start)
        if isinstance(parsed, RolloutRecord):
            return self.feed_record(parsed)
        if parsed.reason == "blank line":
            return []
        if parsed.legacy and (start == 0 or self._legacy_file):
            return self._unsupported_format(start, data)
        resumed_at = data.rfind(RECORD_START, 1)
        if resumed_at == -1:
            return [self._bad_line(start, parsed.reason)]
        torn = self._bad_line(start, f"torn record ({parsed.reason}); a new record starts at byte {start + resumed_at}")
        return [torn, *self.feed_bytes(data[resumed_at:], start + resumed_at)]

    def take_images(self) -> list[GeneratedImage]:
        """The images generated on the lines fed since the last call (kept only with ``keep_images``:
        the image is the record's base64 ``result``, in memory until taken)."""
        images, self._images = self._images, []
        return images

    def feed_record(self, record: RolloutRecord) -> list[BaseEntry]:
        """Entries for one parsed record (ids use ``record.offset``)."""
        try:
            return self._translate(record)
        except ValidationError as exc:  # a value no entry field accepts: report, never raise
            return [self._bad_line(record.offset, f"cannot make a chat entry of it ({exc.errors()[0]['msg']})")]

    # -- translation ----------------------------------------------------------------------
    def _common(self, offset: int, index: int = 0) -> dict[str, Any]:
        """Fields of the ``index``-th entry of the line at ``offset``: its id, conversation and
        time (``ts`` parsed only when an entry needs it)."""
        fields: dict[str, Any] = {"id": f"{self.thread_id}:{offset}:{index}", "conversation": self.conversation}
        text = self._last_timestamp_text
        if text is not None and text != self._parsed_timestamp_text:
            parsed = _parse_timestamp(text)
            if parsed is not None and (self._parsed_timestamp is None or parsed > self._parsed_timestamp):
                self._parsed_timestamp = parsed  # never earlier than an entry before: see docs/rollout.md
            self._parsed_timestamp_text = text
        # lines without a time (a bad line, a record without one) take the previous line's time;
        # before any, a time that re-reading gives again: see no_time_yet()
        fields["ts"] = self._parsed_timestamp if self._parsed_timestamp is not None else self.no_time_yet()
        if self._reply_to is not None:
            fields["in_reply_to"] = self._reply_to
        return fields

    def no_time_yet(self) -> datetime:
        """The ``ts`` of entries before the file's first timestamped line (a bad first line): the
        creation time a UUIDv7 thread id carries (every release that writes ``ordinal`` and most
        before it), else the Unix epoch. Never the time of reading, so re-reading the file gives
        the same entries."""
        millis = _uuid7_millis(self.thread_id)
        return datetime.fromtimestamp((millis or 0) / 1000, UTC)

    def _turn_common(self, offset: int, turn_id: str | None, what: str, index: int = 0) -> dict[str, Any]:
        """:meth:`_common` for a turn's error or end: the id is :func:`turn_entry_id` when the turn is known."""
        fields = self._common(offset, index)
        if turn_id is not None:
            fields["id"] = turn_entry_id(self.thread_id, turn_id, what)
        return fields

    def _translate(self, record: RolloutRecord) -> list[BaseEntry]:
        if record.timestamp is not None:
            self._last_timestamp_text = record.timestamp
        payload = record.payload
        if isinstance(payload, SessionMeta):
            self._session_meta(payload)
            return []
        if isinstance(payload, TurnStartedEvent | TurnContext) and payload.turn_id is not None:
            self._inherited_turn = self._fork and _created_before(payload.turn_id, self._own_thread)
        handler = self._handlers.get(type(payload))
        images = len(self._images)
        entries = handler(record) if handler is not None else []
        if self._inherited_turn:
            del self._images[images:]  # (a fork's parent history: its images were the parent's)
            return []
        return entries

    def _session_meta(self, meta: SessionMeta) -> None:
        """A fork (0.130, 0.135) starts with its own ``session_meta`` (``forked_from_id``) and then
        embeds the parent's: its ``session_meta`` and its whole history, stamped anew. Those turns
        were shown from the parent's own rollout; they are recognised by their ids (see
        :func:`_created_before`) and give no entries here."""
        if self._own_thread is None:
            self._own_thread = meta.thread_id
            self._fork = isinstance(meta.raw.get("forked_from_id"), str)
        elif meta.thread_id != self._own_thread:
            self._fork = True

    def _agent_message(self, record: RolloutRecord) -> list[BaseEntry]:
        payload = record.payload
        assert isinstance(payload, AgentMessageEvent)
        if not payload.text:
            return []
        extra: dict[str, Any] = {"item_id": payload.item_id} if payload.item_id is not None else {}
        return [
            ResponseEntry(
                text=payload.text,
                thread_id=self.thread_id,
                turn_id=payload.turn_id or self._current_turn_id,
                **extra,
                **self._common(record.offset),
            )
        ]

    def _agent_reasoning(self, record: RolloutRecord) -> list[BaseEntry]:
        payload = record.payload
        assert isinstance(payload, AgentReasoningEvent)
        return [ReasoningEntry(text=payload.text, **self._common(record.offset))] if payload.text else []

    def _tool_call_item(self, record: RolloutRecord) -> list[BaseEntry]:
        assert isinstance(record.payload, ToolCallItem)
        call = self._tool_call(record.payload, self._common(record.offset))
        if self._turn_open and call.call_id is not None:
            self._open_calls[call.call_id] = call.tool
        return [call]

    def _tool_output_item(self, record: RolloutRecord) -> list[BaseEntry]:
        assert isinstance(record.payload, ToolOutputItem)
        if record.payload.call_id is None and "name" in record.payload.raw:
            # context Codex hands the model as a tool output of no call (0.171: the thread goal's
            # objective, name "goal_objective", additional_context_tool_output): not a tool's result
            return []
        if record.payload.call_id is not None:
            self._open_calls.pop(record.payload.call_id, None)
        return [self._tool_result(record.payload, self._common(record.offset))]

    def _activity(self, record: RolloutRecord) -> list[BaseEntry]:
        payload = record.payload
        assert isinstance(payload, ActivityRecord)
        if payload.activity in _REPEATS_A_CALL and payload.call_id is not None and payload.call_id in self._tool_names:
            return []  # the call (apply_patch, spawn_agent…) and its result already say it (outside code mode)
        extra: dict[str, Any] = dict(payload.details)
        turn_id = payload.turn_id or self._current_turn_id
        if payload.activity == IMAGE_ACTIVITY and self._keep_images:
            self._keep_image(record, payload, turn_id)
        return [
            ActivityEntry(
                activity=payload.activity,
                text=payload.text,
                thread_id=self.thread_id,
                turn_id=turn_id,
                **extra,
                **self._common(record.offset),
            )
        ]

    def _keep_image(self, record: RolloutRecord, payload: ActivityRecord, turn_id: str | None) -> None:
        """Keep a generated image's base64 ``result`` for :meth:`take_images` (none recorded: nothing)."""
        result = payload.raw.get("result")
        if not isinstance(result, str) or not result:
            return  # (an image Codex keeps elsewhere, e.g. by a file id, is not in the rollout)
        common = self._common(record.offset, 1)
        prompt = payload.raw.get("revised_prompt")
        self._images.append(
            GeneratedImage(
                entry_id=common["id"],
                conversation=self.conversation,
                ts=common["ts"],
                in_reply_to=common.get("in_reply_to"),
                thread_id=self.thread_id,
                turn_id=turn_id,
                call_id=payload.call_id,
                prompt=prompt if isinstance(prompt, str) else "",
                result=result,
            )
        )

    def _mcp_call_end(self, record: RolloutRecord) -> list[BaseEntry]:
        """A call and its result from ``mcp_tool_call_end``, unless a ``function_call`` showed it."""
        payload = record.payload
        assert isinstance(payload, McpCallEndEvent)
        if payload.call_id is not None and payload.call_id in self._tool_names:
            return []
        tool = f"{payload.server}.{payload.tool}" if payload.server else payload.tool
        arguments_text = json.dumps(payload.arguments, ensure_ascii=False) if payload.arguments is not None else ""
        extra: dict[str, Any] = {"mcp_server": payload.server} if payload.server else {}
        call = ToolCallEntry(
            tool=tool,
            arguments=payload.arguments,
            call_id=payload.call_id,
            text=_preview(f"{tool} {arguments_text}".rstrip()),
            **extra,
            **self._common(record.offset),
        )
        result = ToolResultEntry(
            call_id=payload.call_id,
            tool=tool,
            is_error=payload.failed,
            text=payload.text,
            **self._common(record.offset, 1),
        )
        return [call, result]

    def _turn_context(self, record: RolloutRecord) -> list[BaseEntry]:
        assert isinstance(record.payload, TurnContext)
        if record.payload.turn_id is not None:
            self._current_turn_id = record.payload.turn_id
        return []

    def _turn_context_fast(self, data: bytes, payload_at: int, start: int) -> list[BaseEntry]:
        """A ``turn_context`` line on the fast path: only its turn id matters (see ``_translate``)."""
        first = _TURN_ID_FIRST.match(data, payload_at)
        if first is not None:
            turn_id = first[1].decode("utf-8", "replace")
            self._inherited_turn = self._fork and _created_before(turn_id, self._own_thread)
            self._current_turn_id = turn_id
            return []
        if b'"turn_id"' not in data:
            return []  # 0.47, 0.58: no turn id
        parsed = parse_line(data, start)  # the id elsewhere in the payload
        return self.feed_record(parsed) if isinstance(parsed, RolloutRecord) else []

    def _tool_call_completed(self, record: RolloutRecord) -> list[BaseEntry]:
        payload = record.payload
        assert isinstance(payload, ToolCallCompletedEvent)
        if payload.failed and payload.call_id is not None:
            self._failed_calls.add(payload.call_id)
        return []

    def _turn_started(self, record: RolloutRecord) -> list[BaseEntry]:
        assert isinstance(record.payload, TurnStartedEvent)
        self._saw_turn_events = True
        turn_id = record.payload.turn_id
        repeated = self._turn_open and turn_id is not None and turn_id == self._open_turn_id
        closed = [] if repeated else self._close_open_turn(record.offset)
        self._turn_open, self._open_turn_id = True, turn_id
        self._current_turn_id = turn_id
        if not repeated:
            self._new_turn()
            if self._lookup is not None:  # (0.169 records the turn's start before its user message)
                self._reply_to = self._lookup(self._user_messages, None, "")
        return [*closed, self._status(TURN_STARTED, turn_id, "turn started", self._common(record.offset))]

    def _close_open_turn(self, offset: int) -> list[BaseEntry]:
        """For a turn still open when the next one starts (Codex was killed before it wrote the
        end, 0.104): a ``tool_result`` for each call left without one, then ``turn_aborted``.
        Their ids: ``:1``, ``:2`` … of the new ``task_started`` line, and the turn's end id."""
        if not self._turn_open:
            return []
        turn_id = self._open_turn_id
        self._turn_open = False
        if self._fork and turn_id is not None and _created_before(turn_id, self._own_thread):
            self._open_calls.clear()
            return []  # the parent's turn: its end is the parent's rollout's business
        if self._ended(turn_id):
            return []
        out: list[BaseEntry] = []
        for index, (call_id, tool) in enumerate(self._open_calls.items(), start=1):
            out.append(
                ToolResultEntry(
                    call_id=call_id,
                    tool=tool,
                    is_error=True,
                    text="no result was recorded: the turn ended without one",
                    **self._common(offset, index),
                )
            )
        self._open_calls.clear()
        out.append(
            self._status(
                TURN_ABORTED,
                turn_id,
                "turn aborted (Codex recorded no end for it; the next turn started)",
                self._turn_common(offset, turn_id, "end", len(out) + 1),
                reason=NO_END_REASON,
                usage=self.turn_usage(),
            )
        )
        return out

    def _turn_ended(self) -> None:
        """Forget the open turn once an end is read: Codex runs one turn at a time in a thread,
        and review mode (0.135) ends its turn with the id of the turn that asked for the review."""
        self._turn_open = False
        self._open_calls.clear()

    def _user_message(self, record: RolloutRecord) -> list[BaseEntry]:
        payload = record.payload
        assert isinstance(payload, UserMessageEvent)
        if self._lookup is not None:
            found = self._lookup(self._user_messages, payload.client_id, payload.text)
            if found is not None:
                self._reply_to = found
        self._user_messages += 1
        # 0.47 records no turn events: its user_message event is where a turn visibly starts.
        if self._saw_turn_events or payload.turn_id is not None or record.payload_type != "user_message":
            return []
        self._new_turn()
        return [self._status(TURN_STARTED, None, "turn started", self._common(record.offset))]

    def _new_turn(self) -> None:
        self._usage_at_turn_start = self._usage_total

    def _token_count(self, record: RolloutRecord) -> list[BaseEntry]:
        payload = record.payload
        assert isinstance(payload, TokenCountEvent)
        if payload.total is not None:
            self._usage_total = payload.total
        return []

    def turn_usage(self) -> TokenUsage | None:
        """The tokens the current (or last) turn used: the thread's usage now minus at the turn's
        start; ``None`` when Codex reported none during the turn."""
        now, before = self._usage_total, self._usage_at_turn_start
        if now is None or now is before:
            return None
        counts: dict[str, int | None] = {}
        for name in USAGE_FIELDS:
            value, start = now.get(name), (before or {}).get(name, 0)
            counts[name] = value - start if isinstance(value, int) and isinstance(start, int) else None
        return TokenUsage(**counts)

    def _turn_complete(self, record: RolloutRecord) -> list[BaseEntry]:
        payload = record.payload
        assert isinstance(payload, TurnCompleteEvent)
        self._saw_turn_events = True
        self._turn_ended()
        if self._ended(payload.turn_id):
            return []
        if payload.error_message is None:
            return [
                self._status(
                    TURN_COMPLETED,
                    payload.turn_id,
                    "turn completed",
                    self._turn_common(record.offset, payload.turn_id, "end"),
                    usage=self.turn_usage(),
                )
            ]
        error = self._error(
            payload.error_message,
            payload.error_info,
            payload.turn_id,
            self._turn_common(record.offset, payload.turn_id, "error"),
        )
        return [
            error,
            self._status(
                TURN_FAILED,
                payload.turn_id,
                f"turn failed: {error.code}",
                self._turn_common(record.offset, payload.turn_id, "end", 1),
                usage=self.turn_usage(),
            ),
        ]

    def _turn_aborted(self, record: RolloutRecord) -> list[BaseEntry]:
        payload = record.payload
        assert isinstance(payload, TurnAbortedEvent)
        self._turn_ended()
        if self._ended(payload.turn_id):
            return []
        reason = payload.reason or "aborted"
        return [
            self._status(
                TURN_ABORTED,
                payload.turn_id,
                f"turn aborted ({reason})",
                self._turn_common(record.offset, payload.turn_id, "end"),
                reason=payload.reason,
                usage=self.turn_usage(),
            )
        ]

    def _ended(self, turn_id: str | None) -> bool:
        """Whether ``turn_id`` already ended (then its end is not translated again); marks it ended."""
        if turn_id is None:
            return False
        if turn_id in self._ended_turns:
            return True
        self._ended_turns.add(turn_id)
        return False

    def _error_event(self, record: RolloutRecord) -> list[BaseEntry]:
        payload = record.payload
        assert isinstance(payload, ErrorMessageEvent)
        transient = payload.event_type == "stream_error"  # Codex retries after a stream_error
        return [
            self._error(payload.message, payload.error_info, None, self._common(record.offset), transient=transient)
        ]

    def _tool_call(self, item: ToolCallItem, common: dict[str, Any]) -> ToolCallEntry:
        tool, server = display_tool_name(item.name, item.namespace)
        if item.call_id is not None:
            self._tool_names[item.call_id] = tool
        try:
            arguments: Any = json.loads(item.arguments)
        except ValueError:
            arguments = item.arguments
        extra: dict[str, Any] = {}
        if server is not None:
            extra["mcp_server"] = server
        return ToolCallEntry(
            tool=tool,
            arguments=arguments,
            call_id=item.call_id,
            text=_preview(f"{tool} {item.arguments}"),
            **extra,
            **common,
        )

    def _tool_result(self, item: ToolOutputItem, common: dict[str, Any]) -> ToolResultEntry:
        output = clean_tool_output(item.output)
        failed = item.call_id in self._failed_calls or output.failed or (output.exit_code not in (None, 0))
        extra: dict[str, Any] = {} if output.exit_code is None else {"exit_code": output.exit_code}
        tool = self._tool_names.get(item.call_id) if item.call_id is not None else None
        return ToolResultEntry(call_id=item.call_id, tool=tool, is_error=failed, text=output.text, **extra, **common)

    def _status(self, state: str, turn_id: str | None, text: str, common: dict[str, Any], **extra: Any) -> StatusEntry:
        return StatusEntry(state=state, thread_id=self.thread_id, turn_id=turn_id, text=text, **extra, **common)

    def _error(
        self, message: str, error_info: Any, turn_id: str | None, common: dict[str, Any], *, transient: bool = False
    ) -> ErrorEntry:
        entry = error_entry_from_message(
            message,
            conversation=self.conversation,
            thread_id=self.thread_id,
            turn_id=turn_id,
            error_info=error_info,
            ts=common.get("ts"),
            entry_id=common["id"],
        )
        update: dict[str, Any] = {"in_reply_to": common.get("in_reply_to")}
        if transient:
            update["transient"] = True
        return entry.model_copy(update=update)

    def _unsupported_format(self, start: int, data: bytes) -> list[BaseEntry]:
        """One ``VERSION`` error for a rollout whose first line is of the old format, however many
        lines it has; in a file that began in the envelope format such a line is a ``BAD_LINE``."""
        if self._legacy_file:
            return []  # reported once, at the first line
        self._legacy_file = True
        header = json.loads(data.decode("utf-8"))  # it decoded once already: the parser said what it is
        if isinstance(header.get("timestamp"), str):  # the old header's time, so re-reading gives the same ts
            self._last_timestamp_text = header["timestamp"]
        log.warning("rollout of thread %s is in the old format without envelopes: not translated", self.thread_id)
        fields: dict[str, Any] = self._common(start)
        fields.update(thread_id=self.thread_id, offset=start)
        return [
            ErrorEntry(
                code=UNSUPPORTED_FORMAT_CODE,
                text="This rollout was written by a Codex version whose rollout format (records without a "
                "type/payload envelope) coven-codex does not read: nothing of this thread is shown.",
                hint="Install a supported Codex CLI (coven-codex validate names them) and start a new session; "
                "this thread's history stays in Codex.",
                **fields,
            )
        ]

    def _bad_line(self, start: int, reason: str) -> ErrorEntry:
        log.warning("rollout of thread %s: unreadable line at byte %d: %s", self.thread_id, start, reason)
        fields: dict[str, Any] = self._common(start)
        fields.update(thread_id=self.thread_id, offset=start)  # extra fields of the entry
        return ErrorEntry(
            code=BAD_LINE_CODE,
            text=f"Skipped an unreadable line of the Codex rollout at byte {start}: {reason}",
            hint="Codex wrote a line this version cannot read; the rest of the session goes on. "
            "If it repeats, check that the Codex CLI version is supported (coven-codex validate).",
            **fields,
        )


def display_tool_name(name: str, namespace: str | None) -> tuple[str, str | None]:
    """``(tool, mcp server)``: MCP tools as ``"<server>.<tool>"`` for both wire forms
    (0.169 ``namespace="mcp__srv"``, 0.47 ``"srv__tool"``); built-in tools by their name."""
    if namespace:
        server = namespace.removeprefix("mcp__").removesuffix("__")
        return f"{server}.{name}", server
    if name.startswith("mcp__"):
        name = name[len("mcp__") :]
    server, sep, tool = name.partition("__")
    if sep and server and tool:
        return f"{server}.{tool}", server
    return name, None


def _uuid7_millis(value: str) -> int | None:
    """The creation time (ms since the epoch) a UUIDv7 carries in its first 48 bits, or None."""
    hex_digits = value.replace("-", "")
    if len(hex_digits) != 32 or hex_digits[12] != "7":
        return None
    try:
        return int(hex_digits[:12], 16)
    except ValueError:
        return None


def _created_before(turn_id: str, thread_id: str | None) -> bool:
    """Whether turn ``turn_id`` was created before thread ``thread_id``: both are UUIDv7 on the
    releases that fork (0.130 on), so a turn older than the fork's own thread is the parent's.
    Ids that are not UUIDv7 say nothing (False)."""
    if thread_id is None:
        return False
    turn_time, thread_time = _uuid7_millis(turn_id), _uuid7_millis(thread_id)
    return turn_time is not None and thread_time is not None and turn_time < thread_time


def _parse_timestamp(text: str) -> datetime | None:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        return None
    return value.astimezone(UTC) if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _preview(text: str) -> str:
    return text if len(text) <= TEXT_PREVIEW else text[: TEXT_PREVIEW - 1] + "…"
