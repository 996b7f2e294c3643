"""How the console chat shows each kind of entry: a distinct label, colour on a terminal."""

from __future__ import annotations

import json
from dataclasses import dataclass

from coven_codex.entries import (
    ApprovalEntry,
    ApprovalRequestEntry,
    BaseEntry,
    CancelEntry,
    ErrorEntry,
    ReasoningEntry,
    ResponseEntry,
    StatusEntry,
    ThoughtEntry,
    ToolCallEntry,
    ToolResultEntry,
)

RESET = "\x1b[0m"
_STYLES = {
    "thought": "\x1b[1;36m",  # bold cyan
    "response": "\x1b[1;37m",  # bold white
    "reasoning": "\x1b[2;3m",  # dim italic
    "tool_call": "\x1b[33m",  # yellow
    "tool_result": "\x1b[32m",  # green
    "tool_error": "\x1b[31m",  # red
    "status": "\x1b[2m",  # dim
    "error": "\x1b[1;31m",  # bold red
    "approval_request": "\x1b[1;35m",  # bold magenta
    "other": "\x1b[2m",
}
TOOL_OUTPUT_LIMIT = 400


@dataclass(frozen=True, slots=True)
class Painter:
    colour: bool

    def paint(self, style: str, text: str) -> str:
        if not self.colour:
            return text
        return f"{_STYLES[style]}{text}{RESET}"


def _clip(text: str, limit: int = TOOL_OUTPUT_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _arguments(arguments: object) -> str:
    if arguments is None:
        return ""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False, separators=(", ", ": "))


def render_entry(entry: BaseEntry, painter: Painter) -> str | None:
    """One or more display lines for ``entry``; None for entries the chat does not show."""
    match entry:
        case ThoughtEntry():
            return painter.paint("thought", f"{entry.sender}> ") + entry.text
        case ResponseEntry():
            return painter.paint("response", "codex: ") + entry.text
        case ReasoningEntry():
            return painter.paint("reasoning", f"  (thinking) {entry.text}")
        case ToolCallEntry():
            return painter.paint("tool_call", f"  → {entry.tool}({_clip(_arguments(entry.arguments))})")
        case ToolResultEntry():
            style = "tool_error" if entry.is_error else "tool_result"
            label = "✗" if entry.is_error else "←"
            name = f"{entry.tool} " if entry.tool else ""
            return painter.paint(style, f"  {label} {name}{_clip(entry.text)}")
        case StatusEntry():
            label = entry.state.replace("_", " ")
            detail = f": {entry.text}" if entry.text and entry.text.lower() != label else ""
            return painter.paint("status", f"  [{label}{detail}]")
        case ErrorEntry():
            hint = f"\n  hint: {entry.hint}" if entry.hint else ""
            return painter.paint("error", f"  error {entry.code}: {entry.text}{hint}")
        case ApprovalRequestEntry():
            return painter.paint(
                "approval_request",
                f"  approval needed [{entry.request_id}]: {entry.action or entry.text}"
                "  — answer /approve or /deny",
            )
        case ApprovalEntry():
            return painter.paint("status", f"  [{entry.sender} answered {entry.decision} to {entry.request_id}]")
        case CancelEntry():
            return painter.paint("status", f"  [{entry.sender} asked to cancel the turn]")
    if entry.kind == "delta":
        return None
    return painter.paint("other", f"  [{entry.kind}] {entry.text}")
