"""Server-sent events of the OpenAI Responses API, in the shape Codex consumes (docs/rollout.md)."""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Iterator
from typing import Any

from coven_codex.testing.steps import CallTool, OutputItem, Reasoning, Reply, RunCommand

log = logging.getLogger(__name__)

Event = dict[str, Any]


def encode_event(event: Event) -> bytes:
    """One SSE frame: ``event: <type>`` and ``data: <json>``."""
    data = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
    return f"event: {event['type']}\ndata: {data}\n\n".encode()


class IdSource:
    """Readable, unique ids for responses, items and calls (``resp_1``, ``msg_2``, ``call_3`` ...)."""

    def __init__(self) -> None:
        self._counter = itertools.count(1)

    def new(self, prefix: str) -> str:
        """The next id, ``<prefix>_<n>``."""
        return f"{prefix}_{next(self._counter)}"


def _chunks(text: str, size: int) -> Iterator[str]:
    size = max(1, size)
    for start in range(0, len(text), size):
        yield text[start : start + size]


def created(response_id: str) -> Event:
    """The ``response.created`` event."""
    return {"type": "response.created", "response": {"id": response_id}}


def completed(response_id: str) -> Event:
    """The ``response.completed`` event, with a fixed token usage."""
    usage = {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 15,
    }
    return {"type": "response.completed", "response": {"id": response_id, "usage": usage}}


def failed(response_id: str, message: str, code: str) -> Event:
    """A ``response.failed`` event carrying ``code`` and ``message``."""
    return {
        "type": "response.failed",
        "response": {"id": response_id, "status": "failed", "error": {"code": code, "message": message}},
    }


def error_event(message: str, code: str) -> Event:
    """A stream ``error`` event carrying ``code`` and ``message``."""
    return {"type": "error", "code": code, "message": message, "param": None}


def reply_events(step: Reply, item_id: str, output_index: int) -> Iterator[Event]:
    """An assistant message: item added, text deltas of ``step.chunk_size``, item done."""
    yield {
        "type": "response.output_item.added",
        "output_index": output_index,
        "item": {"type": "message", "id": item_id, "role": "assistant", "status": "in_progress", "content": []},
    }
    for piece in _chunks(step.text, step.chunk_size):
        yield {
            "type": "response.output_text.delta",
            "item_id": item_id,
            "output_index": output_index,
            "content_index": 0,
            "delta": piece,
        }
    yield {
        "type": "response.output_item.done",
        "output_index": output_index,
        "item": {
            "type": "message",
            "id": item_id,
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": step.text, "annotations": []}],
        },
    }


def reasoning_events(step: Reasoning, item_id: str, output_index: int) -> Iterator[Event]:
    """A reasoning item: item added, summary deltas, item done with the whole summary."""
    yield {
        "type": "response.output_item.added",
        "output_index": output_index,
        "item": {"type": "reasoning", "id": item_id, "summary": []},
    }
    for piece in _chunks(step.summary, step.chunk_size):
        yield {
            "type": "response.reasoning_summary_text.delta",
            "item_id": item_id,
            "output_index": output_index,
            "summary_index": 0,
            "delta": piece,
        }
    yield {
        "type": "response.output_item.done",
        "output_index": output_index,
        "item": {
            "type": "reasoning",
            "id": item_id,
            "summary": [{"type": "summary_text", "text": step.summary}],
            "content": None,
            "encrypted_content": None,
        },
    }


def function_call_event(
    name: str, namespace: str | None, arguments: Any, *, call_id: str, item_id: str, output_index: int
) -> Event:
    """A completed ``function_call`` item (``namespace`` for a namespaced tool); arguments are sent as JSON text."""
    item: dict[str, Any] = {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
        "status": "completed",
    }
    if namespace is not None:
        item["namespace"] = namespace
    return {"type": "response.output_item.done", "output_index": output_index, "item": item}


def call_tool_event(step: CallTool, tools: list[dict[str, Any]], ids: IdSource, output_index: int) -> Event:
    """The function call of ``step``, with its name resolved against the tools Codex offered."""
    name, namespace = resolve_tool(step.name, tools)
    return function_call_event(
        name,
        namespace,
        step.arguments,
        call_id=step.call_id or ids.new("call"),
        item_id=ids.new("fc"),
        output_index=output_index,
    )


def run_command_event(step: RunCommand, tools: list[dict[str, Any]], ids: IdSource, output_index: int) -> Event:
    """A shell call of ``step.command`` through whichever shell tool Codex offered."""
    offered = {tool.get("name") for tool in tools if tool.get("type") == "function"}
    name: str
    arguments: dict[str, Any]
    if "exec_command" in offered:
        name, arguments = "exec_command", {"cmd": step.command}
    elif "shell" in offered:
        name, arguments = "shell", {"command": ["bash", "-lc", step.command]}
    elif "shell_command" in offered:
        name, arguments = "shell_command", {"command": step.command}
    else:
        log.warning("no shell tool offered (tools: %s); calling exec_command anyway", sorted(map(str, offered)))
        name, arguments = "exec_command", {"cmd": step.command}
    return function_call_event(
        name, None, arguments, call_id=step.call_id or ids.new("call"), item_id=ids.new("fc"), output_index=output_index
    )


def output_item_events(step: OutputItem, item_id: str, output_index: int) -> Iterator[Event]:
    """``response.output_item.added`` then ``.done`` for an arbitrary item (``id`` added if missing)."""
    item = {"id": item_id, **step.item}
    yield {"type": "response.output_item.added", "output_index": output_index, "item": item}
    yield {"type": "response.output_item.done", "output_index": output_index, "item": item}


def split_tool_name(name: str) -> tuple[str | None, str]:
    """``"srv.tool"`` / ``"srv__tool"`` / ``"mcp__srv__tool"`` → ``("srv", "tool")``; a plain
    name → ``(None, name)``."""
    if name.startswith("mcp__"):
        name = name[len("mcp__") :]
        server, sep, tool = name.partition("__")
        return (server, tool) if sep else (None, name)
    server, sep, tool = name.partition(".")
    if sep:
        return server, tool
    server, sep, tool = name.partition("__")
    if sep:
        return server, tool
    return None, name


def resolve_tool(name: str, tools: list[dict[str, Any]]) -> tuple[str, str | None]:
    """The ``(name, namespace)`` a function call must carry for the tool the request offered.

    0.169: MCP tools live in ``{"type": "namespace", "name": "mcp__<server>", "tools": [...]}``
    and the call names the inner tool plus the namespace. 0.47: flat ``<server>__<tool>``.
    An unknown tool is called by the name given (Codex then reports it as unsupported).
    """
    server, tool = split_tool_name(name)
    flat = {str(t.get("name")) for t in tools if t.get("type") == "function"}
    namespaces = {
        str(t.get("name")): {str(inner.get("name")) for inner in t.get("tools") or [] if isinstance(inner, dict)}
        for t in tools
        if t.get("type") == "namespace"
    }
    if server is not None:
        for namespace in (f"mcp__{server}", f"mcp__{server}__", server):
            if tool in namespaces.get(namespace, set()):
                return tool, namespace
        for candidate in (f"{server}__{tool}", f"mcp__{server}__{tool}"):
            if candidate in flat:
                return candidate, None
    if name in flat:
        return name, None
    for namespace, inner in namespaces.items():
        if tool in inner:
            return tool, namespace
    log.warning(
        "tool %r is not among the offered tools %s; calling it by that name",
        name,
        sorted(flat | {f"{ns}.{t}" for ns, inner in namespaces.items() for t in inner}),
    )
    return name, None
