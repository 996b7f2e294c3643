"""What the scripted model server received, with helpers to assert on it."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from coven_codex.rollout.injected import INJECTED_PREFIXES, is_injected

HARNESS_PREFIXES = INJECTED_PREFIXES
"""Texts Codex injects as ``role: user`` messages that the user never typed."""


@dataclass(frozen=True, slots=True)
class FunctionCallOutput:
    """A tool result Codex sent back to the model."""

    call_id: str
    output: str


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One HTTP request as received (headers lower-cased, body decoded from its content encoding)."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    received_at: float = field(default_factory=time.time)

    @property
    def json(self) -> Any:
        """The body decoded as JSON, or ``None`` when it is not JSON."""
        try:
            return json.loads(self.body) if self.body else None
        except (ValueError, UnicodeDecodeError):
            return None

    @property
    def is_responses(self) -> bool:
        """The request is a ``POST .../responses`` (a model turn)."""
        return self.method == "POST" and self.path.split("?")[0].endswith("/responses")

    def input_items(self) -> list[dict[str, Any]]:
        """The objects of the body's ``input`` list (empty if there is none)."""
        data = self.json
        items = data.get("input") if isinstance(data, dict) else None
        return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []

    def tools(self) -> list[dict[str, Any]]:
        """The objects of the body's ``tools`` list, as Codex offered them."""
        data = self.json
        tools = data.get("tools") if isinstance(data, dict) else None
        return [tool for tool in tools if isinstance(tool, dict)] if isinstance(tools, list) else []

    def tool_names(self) -> list[str]:
        """Offered tools, namespaced ones as ``"<namespace>.<name>"``."""
        names: list[str] = []
        for tool in self.tools():
            if tool.get("type") == "namespace":
                names.extend(
                    f"{tool.get('name')}.{inner.get('name')}"
                    for inner in tool.get("tools") or []
                    if isinstance(inner, dict)
                )
            elif isinstance(tool.get("name"), str):
                names.append(tool["name"])
        return names

    def user_texts(self) -> list[str]:
        """Texts of the ``role: user`` messages the user typed (harness-injected ones left out)."""
        texts: list[str] = []
        for item in self.input_items():
            if item.get("type", "message") == "message" and item.get("role") == "user":
                text = _message_text(item)
                if not is_injected(text):
                    texts.append(text)
        return texts

    def starts_turn(self) -> bool:
        """True when the last input item is a user message (not a tool result being sent back)."""
        items = self.input_items()
        return bool(items) and items[-1].get("role") == "user"

    def function_call_outputs(self) -> list[FunctionCallOutput]:
        """The tool results in the input (function and custom tool call outputs), in order."""
        outputs: list[FunctionCallOutput] = []
        for item in self.input_items():
            if item.get("type") in {"function_call_output", "custom_tool_call_output"}:
                outputs.append(FunctionCallOutput(str(item.get("call_id")), _output_text(item.get("output"))))
        return outputs


def _message_text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, dict) and isinstance(output.get("content"), str):
        return str(output["content"])
    if isinstance(output, list):
        return "".join(str(part.get("text", "")) for part in output if isinstance(part, dict))
    return json.dumps(output)


class RequestLog:
    """Every request the server received, in arrival order; awaitable."""

    def __init__(self) -> None:
        self._requests: list[RecordedRequest] = []
        self._changed = asyncio.Event()

    def add(self, request: RecordedRequest) -> None:
        """Record ``request`` and wake whoever waits for a new one."""
        self._requests.append(request)
        self._changed.set()

    def __iter__(self) -> Iterator[RecordedRequest]:
        return iter(list(self._requests))

    def __len__(self) -> int:
        return len(self._requests)

    def __getitem__(self, index: int) -> RecordedRequest:
        return self._requests[index]

    def all(self) -> list[RecordedRequest]:
        """A copy of every request so far, in arrival order."""
        return list(self._requests)

    def responses_requests(self) -> list[RecordedRequest]:
        """The ``POST .../responses`` requests (model turns), in order."""
        return [request for request in self._requests if request.is_responses]

    def other_requests(self) -> list[RecordedRequest]:
        """The requests that are not model turns, in order."""
        return [request for request in self._requests if not request.is_responses]

    def user_texts(self) -> list[str]:
        """Distinct user-typed texts across all model requests, in first-seen order.

        Each request repeats the conversation so far; a text typed twice appears once
        here — use :meth:`turn_prompts` to count turns.
        """
        seen: dict[str, None] = {}
        for request in self.responses_requests():
            for text in request.user_texts():
                seen.setdefault(text, None)
        return list(seen)

    def turn_prompts(self) -> list[str]:
        """The prompt of every request that started a turn (its last input item is the user's)."""
        prompts: list[str] = []
        for request in self.responses_requests():
            if request.starts_turn():
                texts = request.user_texts()
                prompts.append(texts[-1] if texts else "")
        return prompts

    def function_call_outputs(self) -> list[FunctionCallOutput]:
        """Distinct tool results sent back to the model (by ``call_id``), in first-seen order."""
        seen: dict[str, FunctionCallOutput] = {}
        for request in self.responses_requests():
            for output in request.function_call_outputs():
                seen.setdefault(output.call_id, output)
        return list(seen.values())

    async def wait_for(self, count: int, *, responses_only: bool = True) -> None:
        """Wait until at least ``count`` (model) requests arrived (wrap in ``asyncio.timeout``)."""

        def reached() -> bool:
            have = len(self.responses_requests()) if responses_only else len(self._requests)
            return have >= count

        while not reached():
            self._changed.clear()
            await self._changed.wait()
