"""Typed records of Codex rollout files (``$CODEX_HOME/sessions/**/rollout-*.jsonl``).

Every line is ``{"timestamp", "type", "payload"}`` (0.169 adds ``ordinal`` and sometimes
``metadata``). :class:`RolloutRecord` keeps the envelope and a typed view of the payload;
every typed payload keeps the whole payload object in ``raw`` (fields this version does not
know are kept, never dropped) and every record keeps its whole line object in ``raw``.

What each Codex version writes is described in ``docs/rollout.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

JsonObject = dict[str, Any]


@dataclass(frozen=True, slots=True)
class SessionMeta:
    """``session_meta``: the thread's identity (first line of a file)."""

    thread_id: str | None
    cwd: str | None
    cli_version: str | None
    originator: str | None
    source: Any
    raw: JsonObject


@dataclass(frozen=True, slots=True)
class TurnContext:
    """``turn_context``: settings of the turn about to run (``turn_id`` on 0.169 only)."""

    turn_id: str | None
    cwd: str | None
    model: str | None
    raw: JsonObject


@dataclass(frozen=True, slots=True)
class MessageItem:
    """``response_item`` ``message``: a model-visible message (user, developer, assistant)."""

    role: str | None
    text: str
    item_id: str | None
    raw: JsonObject


@dataclass(frozen=True, slots=True)
class ReasoningItem:
    """``response_item`` ``reasoning``: summary texts of a reasoning item."""

    summary: tuple[str, ...]
    item_id: str | None
    raw: JsonObject


@dataclass(frozen=True, slots=True)
class ToolCallItem:
    """``response_item`` ``function_call`` / ``custom_tool_call`` / ``local_shell_call``.

    ``arguments`` is the JSON text Codex recorded (``input`` for custom tools; the action
    for local shell calls, re-encoded). ``namespace`` is set for 0.169 MCP calls
    (``mcp__<server>``).
    """

    item_type: str
    call_id: str | None
    name: str
    namespace: str | None
    arguments: str
    raw: JsonObject


@dataclass(frozen=True, slots=True)
class ToolOutputItem:
    """``response_item`` ``function_call_output`` / ``custom_tool_call_output``.

    ``output`` is the text sent back to the model (content lists joined).
    """

    item_type: str
    call_id: str | None
    output: str
    raw: JsonObject


@dataclass(frozen=True, slots=True)
class UserMessageEvent:
    """The user's prompt as an event: 0.47 ``user_message``; 0.169 ``item_completed`` with a
    ``UserMessage`` item (which carries ``client_id`` = the ``clientUserMessageId`` given to
    ``turn/start``)."""

    text: str
    client_id: str | None
    turn_id: str | None
    raw: JsonObject


@dataclass(frozen=True, slots=True)
class AgentMessageEvent:
    """The assistant's text as an event: 0.47 ``agent_message``; 0.169 ``item_completed`` with
    an ``AgentMessage`` item."""

    text: str
    item_id: str | None
    turn_id: str | None
    raw: JsonObject


@dataclass(frozen=True, slots=True)
class AgentReasoningEvent:
    """A reasoning summary as an event: 0.47 ``agent_reasoning``; 0.169 ``item_completed``
    with a ``Reasoning`` item."""

    text: str
    item_id: str | None
    turn_id: str | None
    raw: JsonObject


@dataclass(frozen=True, slots=True)
class ToolCallCompletedEvent:
    """0.169 ``item_completed`` with an ``McpToolCall`` / ``CommandExecution`` /
    ``DynamicToolCall`` item: how the call ended (``failed`` is its verdict)."""

    item_type: str
    call_id: str | None
    status: str | None
    failed: bool
    turn_id: str | None
    raw: JsonObject


@dataclass(frozen=True, slots=True)
class ItemCompletedEvent:
    """0.169 ``item_completed`` with an item type not listed above."""

    item_type: str
    turn_id: str | None
    raw: JsonObject


@dataclass(frozen=True, slots=True)
class TurnStartedEvent:
    """``task_started`` (0.169; also ``turn_started`` in some versions)."""

    turn_id: str | None
    raw: JsonObject


@dataclass(frozen=True, slots=True)
class TurnCompleteEvent:
    """``task_complete`` / ``turn_complete``; ``error_message`` is set when the turn failed
    (0.169 writes the model error here, e.g. ``unexpected status 401 Unauthorized: ...``)."""

    turn_id: str | None
    last_agent_message: str | None
    error_message: str | None
    error_info: Any
    raw: JsonObject


@dataclass(frozen=True, slots=True)
class TurnAbortedEvent:
    """``turn_aborted``: the turn was interrupted (``reason`` such as ``interrupted``)."""

    turn_id: str | None
    reason: str | None
    raw: JsonObject


@dataclass(frozen=True, slots=True)
class ErrorMessageEvent:
    """``error`` (fatal for the turn) or ``stream_error`` (Codex is retrying) events."""

    event_type: str
    message: str
    error_info: Any
    raw: JsonObject


@dataclass(frozen=True, slots=True)
class TokenCountEvent:
    """``token_count``: the thread's token usage so far (``total``) and of the last model
    request (``last``), each a mapping such as ``{"input_tokens": 10, ...}``; ``None`` when the
    event carries no usage (Codex also writes it for rate-limit updates alone)."""

    total: JsonObject | None
    last: JsonObject | None
    raw: JsonObject


@dataclass(frozen=True, slots=True)
class ActivityRecord:
    """A record that becomes an ``activity`` entry (docs/rollout.md, "Rollouts of other Codex
    releases"): a plan, a web search, a compaction, a user's shell command, a patch, a generated
    image, review findings. ``call_id`` is set for records that may repeat a tool call's result."""

    activity: str
    text: str
    turn_id: str | None
    call_id: str | None
    details: tuple[tuple[str, str | int | bool], ...]
    """Extra fields for the entry (``query``, ``url``, ``exit_code``, ``success``)."""
    raw: JsonObject


@dataclass(frozen=True, slots=True)
class McpCallEndEvent:
    """``mcp_tool_call_end``: an MCP call and its result in one event. In code mode (0.144 to
    0.147) a script's MCP calls are recorded only this way; otherwise the ``function_call`` with
    the same ``call_id`` came first and this repeats it."""

    call_id: str | None
    server: str
    tool: str
    arguments: Any
    text: str
    failed: bool
    raw: JsonObject


@dataclass(frozen=True, slots=True)
class OtherEvent:
    """An ``event_msg`` payload that carries nothing for the chat (``thread_settings_applied``)
    or is unknown."""

    event_type: str | None
    raw: JsonObject


@dataclass(frozen=True, slots=True)
class OtherResponseItem:
    """A ``response_item`` payload type not listed above (kept whole)."""

    item_type: str | None
    raw: JsonObject


@dataclass(frozen=True, slots=True)
class OtherPayload:
    """Any other record type (``world_state``, ``token_usage_record``, ``compacted``, unknown
    ones) or a payload that is not an object; ``value`` is the payload as decoded."""

    value: Any


Payload = (
    SessionMeta
    | TurnContext
    | MessageItem
    | ReasoningItem
    | ToolCallItem
    | ToolOutputItem
    | UserMessageEvent
    | AgentMessageEvent
    | AgentReasoningEvent
    | ToolCallCompletedEvent
    | ItemCompletedEvent
    | TurnStartedEvent
    | TurnCompleteEvent
    | TurnAbortedEvent
    | ErrorMessageEvent
    | TokenCountEvent
    | ActivityRecord
    | McpCallEndEvent
    | OtherEvent
    | OtherResponseItem
    | OtherPayload
)


@dataclass(frozen=True, slots=True)
class RolloutRecord:
    """One decoded line: envelope ``type``, ``payload_type`` (the payload's own ``type``, if
    any), typed ``payload``, and the whole line object in ``raw``."""

    offset: int
    timestamp: str | None
    type: str
    payload_type: str | None
    payload: Payload
    raw: JsonObject


@dataclass(frozen=True, slots=True)
class RolloutParseError:
    """A line that is not a rollout record; ``offset`` is the byte offset of its first byte."""

    offset: int
    reason: str
    excerpt: str
    legacy: bool = False
    """The line is a record of the old format without the ``type``/``payload`` envelope
    (Codex versions before the envelope; see ``docs/rollout.md``)."""

    def describe(self) -> str:
        """The error in one line for logs: the byte offset and the reason."""
        return f"unreadable rollout line at byte {self.offset}: {self.reason}"
