"""Codex rollout files: parse lines into typed records, translate records into chat
entries, locate a thread's file. See ``docs/rollout.md``."""

from coven_codex.rollout.error_entries import error_entry_from_message
from coven_codex.rollout.locator import (
    RolloutNotFoundError,
    find_rollout,
    locate_rollout,
    newest_rollout_for_cwd,
    read_session_meta,
    thread_id_from_path,
)
from coven_codex.rollout.parser import parse_line, peek_envelope
from coven_codex.rollout.records import RolloutParseError, RolloutRecord
from coven_codex.rollout.translator import (
    BAD_LINE_CODE,
    TURN_ABORTED,
    TURN_COMPLETED,
    TURN_END_STATES,
    TURN_FAILED,
    TURN_STARTED,
    GeneratedImage,
    RolloutTranslator,
    display_tool_name,
    turn_entry_id,
)

__all__ = [
    "BAD_LINE_CODE",
    "TURN_ABORTED",
    "TURN_COMPLETED",
    "TURN_END_STATES",
    "TURN_FAILED",
    "TURN_STARTED",
    "GeneratedImage",
    "RolloutNotFoundError",
    "RolloutParseError",
    "RolloutRecord",
    "RolloutTranslator",
    "display_tool_name",
    "error_entry_from_message",
    "find_rollout",
    "locate_rollout",
    "newest_rollout_for_cwd",
    "parse_line",
    "peek_envelope",
    "read_session_meta",
    "thread_id_from_path",
    "turn_entry_id",
]
