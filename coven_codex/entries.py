"""Chat entries: the unit of the journal (docs/journal-protocol.md).

Every entry has ``id``, ``kind``, ``conversation``, ``sender``, ``text`` and ``ts``.
Kinds add their own fields. Entries of a kind this version does not know are kept
as :class:`GenericEntry` with every field intact, so they round-trip without loss.
Unknown *fields* on known kinds are kept too (``extra="allow"``).
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationError,
    field_serializer,
    field_validator,
)

DEFAULT_CONVERSATION = "default"
CODEX_SENDER = "codex"


def utc_now() -> datetime:
    """The current time in UTC (timezone-aware)."""
    return datetime.now(UTC)


def new_entry_id() -> str:
    """A fresh random entry id (32 hex digits)."""
    return uuid.uuid4().hex


class BaseEntry(BaseModel):
    """Fields shared by every kind."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    id: str | None = None
    kind: str
    conversation: str = DEFAULT_CONVERSATION
    sender: str = "user"
    text: str = ""
    ts: datetime = Field(default_factory=utc_now)

    @field_validator("ts")
    @classmethod
    def _ts_is_utc(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)

    @field_serializer("ts")
    def _ts_iso(self, value: datetime) -> str:
        return value.isoformat().replace("+00:00", "Z")

    def to_json(self) -> str:
        """One JSON object on one line (no newline), UTF-8 safe."""
        return json.dumps(self.model_dump(mode="json", exclude_none=False), ensure_ascii=False, separators=(",", ":"))

    def with_id(self, entry_id: str) -> BaseEntry:
        """A copy of this entry with ``id`` set to ``entry_id``."""
        return self.model_copy(update={"id": entry_id})


class Attachment(BaseModel):
    """A file that came with a thought (an image pasted in a chat, ...).

    ``url`` is where the adapter put it: a ``file://`` path the daemon can read, or an
    ``https://`` address. ``media_type`` is its MIME type (``image/png``).
    """

    model_config = ConfigDict(extra="allow")

    url: str
    media_type: str = "application/octet-stream"
    name: str = ""


class DaemonEntry(BaseEntry):
    """Fields shared by the kinds the daemon writes.

    ``in_reply_to`` is the id of the thought whose turn produced the entry (for a turn a thought
    was steered into: the newest thought Codex took in that turn), ``None`` for entries of no
    turn (``session_started``, a bad journal line, ...).
    """

    sender: str = CODEX_SENDER
    in_reply_to: str | None = None


class TokenUsage(BaseModel):
    """Tokens one turn used, as Codex reports them (a count Codex does not give is ``None``)."""

    model_config = ConfigDict(extra="allow")

    input_tokens: int | None = None
    cached_input_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_output_tokens: int | None = None
    total_tokens: int | None = None


class ThoughtEntry(BaseEntry):
    """A user's message for Codex (chat → Codex), with optional attachments.

    ``cwd``, ``model``, ``resume_thread``, ``fork_thread`` and ``timeout`` are options of the Codex thread the
    thought starts: they count on a conversation's first thought (and on the first after a
    ``reset``) and are ignored on later ones (docs/journal-protocol.md, *Thread options*).
    """

    kind: Literal["thought"] = "thought"
    attachments: list[Attachment] = Field(default_factory=list)
    cwd: str | None = None
    """The directory Codex works in, inside one of the operator's ``workspace_roots``."""
    model: str | None = None
    """The model the thread uses (default: Codex's configured model)."""
    resume_thread: str | None = None
    """Take this Codex thread over: the conversation continues that very thread (another conversation
    holding it lets it go first)."""
    fork_thread: str | None = None
    """Start from the history of this Codex thread (a fork of it: the conversation gets a thread of its own)."""
    timeout: float | None = None
    """Seconds each turn of the thread may run (at most ``turn_timeout``)."""
    output_schema: dict[str, Any] | None = None
    """A JSON Schema the turn's final answer must match (Codex's structured output; app-server only).
    Unlike the thread options it counts on every thought that gives it, for that thought's turn."""

    def to_json(self) -> str:
        """One JSON line; thread options that are not given are left out (most thoughts give none)."""
        data = self.model_dump(mode="json", exclude_none=False)
        for name in THREAD_OPTIONS:
            if data.get(name) is None:
                data.pop(name, None)
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


THREAD_OPTIONS = ("cwd", "model", "resume_thread", "fork_thread", "timeout", "output_schema")
"""The fields of a thought that open its Codex thread, and its turn's output schema (left out of its
JSON when not given)."""


class ResponseEntry(DaemonEntry):
    """Codex's assistant text (one complete reply item)."""

    kind: Literal["response"] = "response"
    sender: str = CODEX_SENDER
    thread_id: str | None = None
    turn_id: str | None = None


class DeltaEntry(DaemonEntry):
    """An ephemeral piece of a reply being streamed; the final ``response`` follows.

    Readers that do not stream may ignore ``delta`` entries entirely.
    """

    kind: Literal["delta"] = "delta"
    sender: str = CODEX_SENDER
    item_id: str | None = None


class ReasoningEntry(DaemonEntry):
    """A reasoning summary Codex produced."""

    kind: Literal["reasoning"] = "reasoning"
    sender: str = CODEX_SENDER


class ToolCallEntry(DaemonEntry):
    """Codex called a tool (MCP spell, shell command, ...)."""

    kind: Literal["tool_call"] = "tool_call"
    sender: str = CODEX_SENDER
    tool: str
    arguments: Any = None
    call_id: str | None = None


class ToolResultEntry(DaemonEntry):
    """The result of a tool call, paired with its call by ``call_id``."""

    kind: Literal["tool_result"] = "tool_result"
    sender: str = CODEX_SENDER
    call_id: str | None = None
    tool: str | None = None
    is_error: bool = False


StatusState = str
"""Known states: session_started, session_resumed, session_waiting, session_ended,
turn_started, turn_completed, turn_aborted, session_reset, thread_lost, thread_moved, settings. Others may appear."""


class ConversationSettings(BaseModel):
    """A conversation's settings chosen from the chat (``/project``, ``/model``, ``/mode``; ``None``: the
    daemon's own): a ``project`` of the operator's ``[projects]``, a ``model`` of its ``models``, a ``mode``
    of its ``modes`` (docs/configuration.md, *Settings from the chat*)."""

    model_config = ConfigDict(extra="allow")

    project: str | None = None
    model: str | None = None
    mode: str | None = None


class StatusEntry(DaemonEntry):
    """Session and turn lifecycle; a ``settings`` status carries the conversation's settings."""

    kind: Literal["status"] = "status"
    sender: str = CODEX_SENDER
    state: StatusState
    thread_id: str | None = None
    turn_id: str | None = None
    usage: TokenUsage | None = None
    """On a turn's end: the tokens the turn used, where Codex reports them."""
    settings: ConversationSettings | None = None
    """On a ``settings`` status (the answer to a ``settings`` entry): the conversation's settings now."""


class ErrorEntry(DaemonEntry):
    """A classified failure (docs/operations.md, Error codes in the chat) or a bad journal line."""

    kind: Literal["error"] = "error"
    sender: str = CODEX_SENDER
    code: str = "UNKNOWN"
    hint: str = ""


class CancelEntry(BaseEntry):
    """Chat asks Codex to stop the running turn of this conversation.

    With ``queued``, the conversation's thoughts not yet handed to Codex are dropped too (each
    gets a ``status`` of state ``thought_cancelled``); such a cancel counts also when the daemon
    reads it after a restart.
    """

    kind: Literal["cancel"] = "cancel"
    queued: bool = False


class ResetEntry(BaseEntry):
    """Chat asks for a fresh Codex session in this conversation (the next thought starts it).

    ``cwd``: the directory the next thread works in (inside one of ``workspace_roots``).
    ``resume_thread``: the conversation takes this Codex thread over at once instead of waiting for a
    new one (chat ``/resume``; another conversation holding it lets it go first).
    """

    kind: Literal["reset"] = "reset"
    cwd: str | None = None
    resume_thread: str | None = None

    def to_json(self) -> str:
        """One JSON line; ``resume_thread`` is left out when not given (older readers never saw it)."""
        data = self.model_dump(mode="json")
        if data.get("resume_thread") is None:
            data.pop("resume_thread", None)
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


class SettingsEntry(BaseEntry):
    """Chat changes the conversation's settings (the fields given; ``sender`` is who) or, giving none,
    asks what they are and what is allowed. The daemon answers with a ``settings`` status, or a
    ``REFUSED`` error saying what is allowed (docs/journal-protocol.md, *Settings*)."""

    kind: Literal["settings"] = "settings"
    project: str | None = None
    model: str | None = None
    mode: str | None = None

    @property
    def change(self) -> ConversationSettings:
        """The requested values (``None``: unchanged)."""
        return ConversationSettings(project=self.project, model=self.model, mode=self.mode)


class ApprovalRequestEntry(DaemonEntry):
    """Codex asks permission for an action; answered by an ``approval`` entry."""

    kind: Literal["approval_request"] = "approval_request"
    sender: str = CODEX_SENDER
    request_id: str
    action: str = ""
    call_id: str | None = None


class ApprovalEntry(BaseEntry):
    """Chat's answer to an ``approval_request``."""

    kind: Literal["approval"] = "approval"
    request_id: str
    decision: Literal["approve", "approve_for_session", "deny"]
    """``approve_for_session``: approve, and let Codex run the same again in this session without asking."""


ActivityKind = str
"""Known activities (docs/journal-protocol.md): ``plan``, ``web_search``, ``compaction``,
``user_shell``, ``patch``, ``image``, ``review``, ``subagent``, ``agent_message``, ``guardian``,
``goal``, ``thread_name``, ``undo``, ``rollback``. Others may appear."""


class ActivityEntry(DaemonEntry):
    """Something Codex did in a turn besides replying and calling tools: proposed a plan,
    searched the web, compacted the history, ran a user's ``!command``… (``activity`` says which)."""

    kind: Literal["activity"] = "activity"
    sender: str = CODEX_SENDER
    activity: ActivityKind
    thread_id: str | None = None
    turn_id: str | None = None


class FileEntry(DaemonEntry):
    """A file Codex sends to the chat (the built-in spell ``send_file``, docs/journal-protocol.md,
    *Files out*): ``attachment`` is the copy in the journal's attachments folder (a ``file://`` URL,
    its media type by content, its original name, extra ``size`` and ``sha256``); ``text`` is the
    caption. Adapters upload it."""

    kind: Literal["file"] = "file"
    sender: str = CODEX_SENDER
    attachment: Attachment
    thread_id: str | None = None
    turn_id: str | None = None


class GenericEntry(BaseEntry):
    """An entry of a kind this version does not know; kept whole so it round-trips."""


KNOWN_KINDS: frozenset[str] = frozenset(
    {
        "thought",
        "response",
        "delta",
        "reasoning",
        "tool_call",
        "tool_result",
        "status",
        "error",
        "cancel",
        "reset",
        "approval_request",
        "approval",
        "activity",
        "file",
        "settings",
    }
)


def _kind_tag(value: Any) -> str:
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    if isinstance(kind, str) and kind in KNOWN_KINDS and not isinstance(value, GenericEntry):
        return kind
    return "generic"


Entry = Annotated[
    Annotated[ThoughtEntry, Tag("thought")]
    | Annotated[ResponseEntry, Tag("response")]
    | Annotated[DeltaEntry, Tag("delta")]
    | Annotated[ReasoningEntry, Tag("reasoning")]
    | Annotated[ToolCallEntry, Tag("tool_call")]
    | Annotated[ToolResultEntry, Tag("tool_result")]
    | Annotated[StatusEntry, Tag("status")]
    | Annotated[ErrorEntry, Tag("error")]
    | Annotated[CancelEntry, Tag("cancel")]
    | Annotated[ResetEntry, Tag("reset")]
    | Annotated[ApprovalRequestEntry, Tag("approval_request")]
    | Annotated[ApprovalEntry, Tag("approval")]
    | Annotated[ActivityEntry, Tag("activity")]
    | Annotated[FileEntry, Tag("file")]
    | Annotated[SettingsEntry, Tag("settings")]
    | Annotated[GenericEntry, Tag("generic")],
    Discriminator(_kind_tag),
]
"""Any chat entry; validate with :func:`parse_entry`."""

_ENTRY_ADAPTER: TypeAdapter[BaseEntry] = TypeAdapter(Entry)


class EntryError(ValueError):
    """A journal line that is not a valid entry."""


def parse_entry(data: Any) -> BaseEntry:
    """Validate a decoded JSON object into the right entry class.

    Raises :class:`EntryError` with a readable reason when it is not an entry.
    """
    if not isinstance(data, dict):
        raise EntryError(f"an entry must be a JSON object, got {type(data).__name__}")
    if not isinstance(data.get("kind"), str) or not data["kind"]:
        raise EntryError("an entry needs a non-empty string 'kind'")
    try:
        return _ENTRY_ADAPTER.validate_python(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"][1:]) or "entry"
        raise EntryError(f"invalid {data['kind']} entry: {where}: {first['msg']}") from None


def parse_entry_json(line: str | bytes) -> BaseEntry:
    """Decode one JSON line into an entry; raises :class:`EntryError` on any problem."""
    try:
        data = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise EntryError(f"not JSON: {exc}") from None
    return parse_entry(data)
