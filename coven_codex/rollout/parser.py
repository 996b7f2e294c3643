"""Rollout line → typed record. Never raises: anything unreadable becomes a
:class:`~coven_codex.rollout.records.RolloutParseError` carrying the line's byte offset."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from coven_codex.rollout import activities
from coven_codex.rollout.records import (
    AgentMessageEvent,
    AgentReasoningEvent,
    ErrorMessageEvent,
    ItemCompletedEvent,
    JsonObject,
    McpCallEndEvent,
    MessageItem,
    OtherEvent,
    OtherPayload,
    OtherResponseItem,
    Payload,
    ReasoningItem,
    RolloutParseError,
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

EXCERPT_CHARS = 80
TOOL_SEARCH = "tool_search"
"""The tool name a ``tool_search_call`` is shown under."""


def parse_line(data: bytes, offset: int) -> RolloutRecord | RolloutParseError:
    """Decode one rollout line (without its newline) that starts at byte ``offset``."""
    try:
        obj = json.loads(data.decode("utf-8"))  # explicit: json.loads(bytes) would guess UTF-16/32
    except UnicodeDecodeError as exc:
        return _error(data, offset, f"not UTF-8 ({exc.reason} at byte {exc.start})")
    except ValueError as exc:
        reason = "blank line" if not data.strip() else f"not JSON ({exc})"
        return _error(data, offset, reason)
    except RecursionError:
        return _error(data, offset, "JSON nested too deeply")
    if not isinstance(obj, dict):
        return _error(data, offset, f"a rollout line must be a JSON object, got {type(obj).__name__}")
    return record_from_object(obj, offset, data)


def record_from_object(obj: JsonObject, offset: int, data: bytes = b"") -> RolloutRecord | RolloutParseError:
    """Type an already decoded line object."""
    kind = obj.get("type")
    if "payload" not in obj and is_legacy_record(obj):
        return _error(data or _dump(obj), offset, "a record of the old rollout format (no envelope)", legacy=True)
    if not isinstance(kind, str):
        return _error(data or _dump(obj), offset, "the line has no string 'type'")
    if "payload" not in obj:
        return _error(data or _dump(obj), offset, f"the {kind} line has no 'payload'")
    payload = obj["payload"]
    timestamp = obj.get("timestamp")
    payload_type = payload.get("type") if isinstance(payload, dict) else None
    typed: Payload
    if not isinstance(payload, dict):
        typed = OtherPayload(payload)
    else:
        try:
            typed = _type_payload(kind, payload_type, payload)
        except (TypeError, ValueError, AttributeError, KeyError, RecursionError):
            # A payload shaped in a way no typer foresaw is still a record: kept whole.
            typed = OtherPayload(payload)
    return RolloutRecord(
        offset=offset,
        timestamp=timestamp if isinstance(timestamp, str) else None,
        type=kind,
        payload_type=payload_type if isinstance(payload_type, str) else None,
        payload=typed,
        raw=obj,
    )


def _dump(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False)[:EXCERPT_CHARS].encode()


def _error(data: bytes, offset: int, reason: str, *, legacy: bool = False) -> RolloutParseError:
    return RolloutParseError(offset, reason, data[:EXCERPT_CHARS].decode("utf-8", "replace"), legacy)


LEGACY_ITEM_TYPES: frozenset[str] = frozenset(
    {
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
        "custom_tool_call",
        "custom_tool_call_output",
        "local_shell_call",
        "web_search_call",
    }
)
"""Model items that the old rollout format wrote bare, one per line, without an envelope."""


def is_legacy_record(obj: JsonObject) -> bool:
    """Whether a decoded line without ``payload`` is a record of the old rollout format: its
    session header (``{"id", "timestamp", "instructions"...}`` without ``type``), a state line
    (``{"record_type": "state"}``) or a bare model item (``{"type": "message", ...}``)."""
    if isinstance(obj.get("record_type"), str):
        return True
    kind = obj.get("type")
    if kind is None:
        return isinstance(obj.get("id"), str) and isinstance(obj.get("timestamp"), str)
    return kind in LEGACY_ITEM_TYPES


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def content_text(content: Any) -> str:
    """Join the ``text`` of every part of a content list (or return a plain string)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str))


IMAGE_PLACEHOLDER = "[image]"
"""What an image in a tool's output shows as (``view_image`` returns the picture itself as an
``input_image`` part: its data stays in Codex)."""
_IMAGE_PARTS = frozenset({"input_image", "inputImage", "image"})


def tool_search_text(p: JsonObject) -> str:
    """What a ``tool_search_output`` found: the names of the tools it loaded, or that it found none."""
    tools = p.get("tools")
    names: list[str] = []
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            continue
        inner = tool.get("tools")
        if tool.get("type") == "namespace" and isinstance(inner, list):
            names += [
                f"{tool['name']}.{t['name']}" for t in inner if isinstance(t, dict) and isinstance(t.get("name"), str)
            ]
        else:
            names.append(tool["name"])
    if names:
        return f"found {len(names)} tool{'s' if len(names) != 1 else ''}: {', '.join(names)}"
    return "found no tools" if "tools" in p else output_text(p.get("output"))


def output_text(output: Any) -> str:
    """The text of a tool output as recorded (string, content list, or ``{"content": ...}``)."""
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "\n".join(
            part["text"] if isinstance(part.get("text"), str) else IMAGE_PLACEHOLDER
            for part in output
            if isinstance(part, dict) and (isinstance(part.get("text"), str) or part.get("type") in _IMAGE_PARTS)
        )
    if isinstance(output, dict):
        if "content" in output:
            return output_text(output["content"])
        return json.dumps(output, ensure_ascii=False)
    return "" if output is None else json.dumps(output)


# -- payload typing -------------------------------------------------------------------------------
def _session_meta(p: JsonObject) -> Payload:
    # 0.47 nests the meta in some versions under "meta"; take the flat form first.
    meta = p["meta"] if isinstance(p.get("meta"), dict) and "id" not in p else p
    return SessionMeta(
        _str(meta.get("id")),
        _str(meta.get("cwd")),
        _str(meta.get("cli_version")),
        _str(meta.get("originator")),
        meta.get("source"),
        p,
    )


def _turn_context(p: JsonObject) -> Payload:
    return TurnContext(_str(p.get("turn_id")), _str(p.get("cwd")), _str(p.get("model")), p)


def _response_item(item_type: Any, p: JsonObject) -> Payload:
    if item_type == "message":
        text = content_text(p.get("content"))
        if p.get("role") == "user" and text.startswith(activities.USER_SHELL_PREFIX):
            shell = activities.user_shell(text, p)
            if shell is not None:
                return shell
        return MessageItem(_str(p.get("role")), text, _str(p.get("id")), p)
    if item_type == "web_search_call":
        return activities.web_search(p) or OtherResponseItem(item_type, p)
    if item_type == "image_generation_call":
        return activities.image_generated(p)
    if item_type == "reasoning":
        summary = p.get("summary")
        parts = summary if isinstance(summary, list) else []
        texts = tuple(part["text"] for part in parts if isinstance(part, dict) and isinstance(part.get("text"), str))
        return ReasoningItem(texts, _str(p.get("id")), p)
    if item_type == "function_call":
        arguments = p.get("arguments")
        arguments_text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        return ToolCallItem(
            "function_call",
            _str(p.get("call_id")),
            _str(p.get("name")) or "",
            _str(p.get("namespace")),
            arguments_text,
            p,
        )
    if item_type == "custom_tool_call":
        tool_input = p.get("input")
        return ToolCallItem(
            "custom_tool_call",
            _str(p.get("call_id")),
            _str(p.get("name")) or "",
            None,
            tool_input if isinstance(tool_input, str) else json.dumps(tool_input),
            p,
        )
    if item_type == "local_shell_call":
        return ToolCallItem(
            "local_shell_call",
            _str(p.get("call_id")) or _str(p.get("id")),
            "local_shell",
            None,
            json.dumps(p.get("action")),
            p,
        )
    if item_type == "tool_search_call":  # the model looks up deferred tools (0.16x on)
        arguments = p.get("arguments")
        return ToolCallItem(
            "tool_search_call",
            _str(p.get("call_id")) or _str(p.get("id")),
            TOOL_SEARCH,
            None,
            arguments if isinstance(arguments, str) else json.dumps(arguments),
            p,
        )
    if item_type == "tool_search_output":
        return ToolOutputItem(item_type, _str(p.get("call_id")), tool_search_text(p), p)
    if item_type in {"function_call_output", "custom_tool_call_output"}:
        return ToolOutputItem(item_type, _str(p.get("call_id")), output_text(p.get("output")), p)
    return OtherResponseItem(_str(item_type), p)


_TOOL_ITEM_TYPES = frozenset({"McpToolCall", "CommandExecution", "DynamicToolCall", "FileChange", "WebSearch"})
_FAILED_STATUSES = frozenset({"failed", "error", "declined", "cancelled"})


def _item_completed(p: JsonObject) -> Payload:
    item = p.get("item")
    turn_id = _str(p.get("turn_id"))
    if not isinstance(item, dict):
        return ItemCompletedEvent("", turn_id, p)
    item_type = _str(item.get("type")) or ""
    if item_type == "AgentMessage":
        return AgentMessageEvent(content_text(item.get("content")), _str(item.get("id")), turn_id, p)
    if item_type == "UserMessage":
        return UserMessageEvent(content_text(item.get("content")), _str(item.get("client_id")), turn_id, p)
    if item_type == "Reasoning":
        summary = item.get("summary_text")
        text = "\n".join(s for s in summary if isinstance(s, str)) if isinstance(summary, list) else ""
        return AgentReasoningEvent(text, _str(item.get("id")), turn_id, p)
    if item_type == "Plan":
        return activities.plan(item, turn_id) or ItemCompletedEvent(item_type, turn_id, p)
    if item_type == "ExitedReviewMode":  # 0.171: review mode's end as an item (0.135: exited_review_mode)
        return activities.review_finished(item) or ItemCompletedEvent(item_type, turn_id, p)
    if item_type in _TOOL_ITEM_TYPES:
        status = _str(item.get("status"))
        result = item.get("result")
        exit_code = item.get("exit_code")
        failed = (
            (status or "").lower() in _FAILED_STATUSES
            or (isinstance(result, dict) and result.get("isError") is True)
            or (isinstance(exit_code, int) and not isinstance(exit_code, bool) and exit_code != 0)
        )
        return ToolCallCompletedEvent(item_type, _str(item.get("id")), status, failed, turn_id, p)
    return ItemCompletedEvent(item_type, turn_id, p)


def _token_count(p: JsonObject) -> Payload:
    info = p.get("info")
    if not isinstance(info, dict):
        return TokenCountEvent(None, None, p)
    total, last = info.get("total_token_usage"), info.get("last_token_usage")
    return TokenCountEvent(total if isinstance(total, dict) else None, last if isinstance(last, dict) else None, p)


def _mcp_call_end(p: JsonObject) -> Payload:
    invocation = p.get("invocation")
    call = invocation if isinstance(invocation, dict) else {}
    result = p.get("result")
    failed = False
    if isinstance(result, dict) and "Err" in result:
        failed, text = True, output_text(result["Err"])
    else:
        ok = result.get("Ok", result) if isinstance(result, dict) else result
        text = output_text(ok) if ok is not None else ""
        failed = isinstance(ok, dict) and (ok.get("isError") is True or ok.get("is_error") is True)
    if isinstance(p.get("error"), str):
        failed, text = True, p["error"]
    return McpCallEndEvent(
        _str(p.get("call_id")),
        _str(call.get("server")) or "",
        _str(call.get("tool")) or "",
        call.get("arguments"),
        text,
        failed,
        p,
    )


def _task_complete(p: JsonObject) -> Payload:
    error = p.get("error")
    message: str | None = None
    info: Any = None
    if isinstance(error, dict):
        message = _str(error.get("message")) or json.dumps(error)
        info = error.get("codex_error_info")
    elif isinstance(error, str):
        message = error
    return TurnCompleteEvent(_str(p.get("turn_id")), _str(p.get("last_agent_message")), message, info, p)


_EVENT_TYPERS: dict[str, Callable[[JsonObject], Payload]] = {
    "user_message": lambda p: UserMessageEvent(
        _str(p.get("message")) or "", _str(p.get("client_id")), _str(p.get("turn_id")), p
    ),
    "agent_message": lambda p: AgentMessageEvent(
        _str(p.get("message")) or "", _str(p.get("id")), _str(p.get("turn_id")), p
    ),
    "agent_reasoning": lambda p: AgentReasoningEvent(_str(p.get("text")) or "", None, _str(p.get("turn_id")), p),
    "item_completed": _item_completed,
    "task_started": lambda p: TurnStartedEvent(_str(p.get("turn_id")), p),
    "turn_started": lambda p: TurnStartedEvent(_str(p.get("turn_id")), p),
    "task_complete": _task_complete,
    "token_count": _token_count,
    "turn_complete": _task_complete,
    "turn_aborted": lambda p: TurnAbortedEvent(_str(p.get("turn_id")), _str(p.get("reason")), p),
    "error": lambda p: ErrorMessageEvent(
        "error", _str(p.get("message")) or json.dumps(p), p.get("codex_error_info"), p
    ),
    "patch_apply_end": activities.patch_applied,
    "guardian_assessment": lambda p: activities.guardian_assessed(p) or OtherEvent("guardian_assessment", p),
    "thread_goal_updated": lambda p: activities.goal_updated(p) or OtherEvent("thread_goal_updated", p),
    "thread_name_updated": lambda p: activities.thread_named(p) or OtherEvent("thread_name_updated", p),
    "undo_completed": activities.undo_completed,
    "thread_rolled_back": activities.rolled_back,
    "mcp_tool_call_end": _mcp_call_end,
    "exited_review_mode": lambda p: activities.review_finished(p) or OtherEvent("exited_review_mode", p),
    "stream_error": lambda p: ErrorMessageEvent(
        "stream_error", _str(p.get("message")) or json.dumps(p), p.get("codex_error_info"), p
    ),
}


def _type_payload(kind: str, payload_type: Any, p: JsonObject) -> Payload:
    if kind == "event_msg":
        if payload_type in activities.COLLAB_EVENTS:
            return activities.subagent(payload_type, p)
        typer = _EVENT_TYPERS.get(payload_type) if isinstance(payload_type, str) else None
        return typer(p) if typer is not None else OtherEvent(_str(payload_type), p)
    if kind == "response_item":
        return _response_item(payload_type, p)
    if kind == "session_meta":
        return _session_meta(p)
    if kind == "turn_context":
        return _turn_context(p)
    if kind == "compacted":
        return activities.compaction(p)
    if kind == "inter_agent_communication":
        return activities.inter_agent_message(p) or OtherPayload(p)
    return OtherPayload(p)


# -- envelope peeking (fast path) -----------------------------------------------------------------
ENVELOPE_PATTERN = re.compile(
    rb'\{"timestamp":"[^"\\]*",(?:"ordinal":\d+,)?"type":"(?P<type>[A-Za-z_]+)","payload":'
    rb'(?:\{"type":"(?P<ptype>[A-Za-z_]+)")?'
)


def peek_envelope(data: bytes) -> tuple[str, str | None] | None:
    """``(type, payload type)`` read from the start of a line as Codex serialises it, without
    decoding the line; ``None`` when the line does not start the way Codex writes it."""
    match = ENVELOPE_PATTERN.match(data)
    if match is None:
        return None
    ptype = match["ptype"]
    return match["type"].decode(), ptype.decode() if ptype is not None else None
