"""Tool outputs as Codex recorded them → the text a chat shows, and whether they failed.

- 0.169 wraps outputs in a header (``Wall time: ... seconds``, ``Process exited with code N``,
  ``Chunk ID: ...``) ended by an ``Output:`` line; the header is dropped, the exit code kept.
- 0.47 records shell results as JSON ``{"output": ..., "metadata": {"exit_code": N}}`` and MCP
  results as a JSON content list ``[{"type": "text", "text": ...}]``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

_HEADER_LINE = re.compile(
    r"^(?:Chunk ID|Wall time|Process exited with code|Original token count|"
    r"Process running with session ID|Exit code)\b.*$"
)
_EXIT = re.compile(r"^(?:Process exited with code|Exit code:?)\s*(-?\d+)", re.M)


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """A tool's output as a chat shows it, and the exit code when the output reports one."""

    text: str
    exit_code: int | None


def clean_tool_output(raw: str) -> ToolOutput:
    """Strip Codex's wrappers; ``exit_code`` is set when the output reports one."""
    stripped = raw.lstrip()
    if stripped[:1] in {"{", "["}:
        decoded = _decode_json_output(stripped)
        if decoded is not None:
            return decoded
    head, sep, body = raw.partition("Output:")
    if sep and all(_HEADER_LINE.match(line) for line in head.strip().splitlines()):
        match = _EXIT.search(head)
        return ToolOutput(body[1:] if body.startswith("\n") else body, int(match[1]) if match else None)
    return ToolOutput(raw, None)


def _decode_json_output(text: str) -> ToolOutput | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if isinstance(value, dict) and isinstance(value.get("output"), str):
        metadata = value.get("metadata")
        exit_code = metadata.get("exit_code") if isinstance(metadata, dict) else None
        return ToolOutput(value["output"], exit_code if isinstance(exit_code, int) else None)
    if isinstance(value, list) and value and all(isinstance(part, dict) and "type" in part for part in value):
        return ToolOutput("\n".join(str(part.get("text", "")) for part in value if "text" in part), None)
    return None
