"""Tool outputs as Codex recorded them → the text a chat shows, and whether they failed.

- 0.169 wraps outputs in a header (``Wall time: ... seconds``, ``Process exited with code N``,
  ``Chunk ID: ...``) ended by an ``Output:`` line; the header is dropped, the exit code kept.
- 0.116 to 0.118 put ``Command: <the command>`` before that header (the command may span
  lines); it is dropped with the header, and the exit code after it is read.
- Code mode (0.144 to 0.147: the model runs scripts through one ``exec`` tool) begins results with
  ``Script completed``, ``Script failed`` or ``Script running with cell ID N``, then
  ``Wall time N seconds`` (no colon) and ``Output:``; ``Script failed`` marks the result failed.
  The same texts may come as a content list (``[{"type": "input_text", "text": ...}]``).
- 0.47 records shell results as JSON ``{"output": ..., "metadata": {"exit_code": N}}`` and MCP
  results as a JSON content list ``[{"type": "text", "text": ...}]``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

_HEADER_LINE = re.compile(
    r"^(?:Chunk ID|Wall time|Process exited with code|Original token count|"
    r"Process running with session ID|Exit code|Script completed|Script failed|Script running with cell ID)\b.*$"
)
_EXIT = re.compile(r"^(?:Process exited with code|Exit code:?)\s*(-?\d+)", re.M)
_COMMAND_END = re.compile(
    r"\n(?=(?:Chunk ID|Wall time|Process exited with code|Original token count|Process running with session ID|"
    r"Exit code)\b)"
)
"""Where the ``Command: …`` line (0.116 to 0.118) ends: at the first header line after it."""
_SCRIPT_FAILED = re.compile(r"^Script failed\b", re.M)


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """A tool result as shown: its text without Codex's header, the exit code when one was
    reported, and whether the output itself says the call failed (code mode's ``Script failed``)."""

    text: str
    exit_code: int | None
    failed: bool = False


def clean_tool_output(raw: str) -> ToolOutput:
    """Strip Codex's wrappers; ``exit_code`` is set when the output reports one."""
    stripped = raw.lstrip()
    if stripped[:1] in {"{", "["}:
        decoded = _decode_json_output(stripped)
        if decoded is not None:
            return decoded
    return _strip_header(raw)


def _strip_header(raw: str) -> ToolOutput:
    rest = raw
    if rest.startswith("Command: "):
        command_end = _COMMAND_END.search(rest)
        if command_end is None:
            return ToolOutput(raw, None)
        rest = rest[command_end.end() :]
    head, sep, body = rest.partition("Output:")
    lines = head.strip().splitlines()
    if sep and lines and all(_HEADER_LINE.match(line) for line in lines):
        match = _EXIT.search(head)
        if lines[0].startswith("Script "):  # code mode: the parts of a content list were joined by newlines
            return ToolOutput(body.lstrip("\n"), None, failed=_SCRIPT_FAILED.search(head) is not None)
        return ToolOutput(body[1:] if body.startswith("\n") else body, int(match[1]) if match else None)
    if not sep and lines and all(_HEADER_LINE.match(line) for line in lines) and lines[0].startswith("Script "):
        # code mode without an output section: "Script completed" / "Script failed\nScript error: …" is not this
        return ToolOutput("", None, failed=lines[0].startswith("Script failed"))
    if rest.startswith("Script failed"):
        return ToolOutput(rest.removeprefix("Script failed").lstrip("\n"), None, failed=True)
    if rest.startswith("Script completed\n") or rest == "Script completed":
        return ToolOutput(rest.removeprefix("Script completed").lstrip("\n"), None)
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
        joined = "\n".join(str(part.get("text", "")) for part in value if "text" in part)
        return _strip_header(joined)
    return None
