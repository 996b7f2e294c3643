"""Codex failures → classified ``error`` chat entries (docs/operations.md, Error codes in the chat).

Used by the translator for errors Codex writes into the rollout (0.169: ``task_complete``
with ``error``; ``error`` / ``stream_error`` events) and by the agent for errors that only
appear elsewhere (0.47 writes model errors only to ``codex exec --json`` output, as
``{"type": "error", "message": ...}`` and ``turn.failed``; app-server sends ``error``
notifications): call :func:`error_entry_from_message` with the message.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from coven_codex.codex.errors import classify, shorten
from coven_codex.entries import DEFAULT_CONVERSATION, ErrorEntry

_INFO_WORDS: dict[str, str] = {
    "context_window_exceeded": "context window exceeded",
    "usage_limit_exceeded": "quota: usage limit exceeded",
    "unauthorized": "unauthorized",
    "sandbox_error": "sandbox error",
    "response_stream_disconnected": "stream disconnected",
}


def error_info_words(error_info: Any) -> str:
    """Words describing Codex's ``codex_error_info`` (e.g. ``{"http_connection_failed":
    {"http_status_code": 401}}`` → ``"HTTP 401"``), to help classification."""
    words: list[str] = []
    if isinstance(error_info, str):
        words.append(_INFO_WORDS.get(error_info, error_info.replace("_", " ")))
    elif isinstance(error_info, dict):
        for name, detail in error_info.items():
            words.append(_INFO_WORDS.get(str(name), str(name).replace("_", " ")))
            status = detail.get("http_status_code") if isinstance(detail, dict) else None
            if isinstance(status, int) and not isinstance(status, bool):
                words.append(f"HTTP {status}")
    return "; ".join(words)


def error_entry_from_message(
    message: str,
    *,
    conversation: str = DEFAULT_CONVERSATION,
    thread_id: str | None = None,
    turn_id: str | None = None,
    exit_code: int | None = None,
    error_info: Any = None,
    entry_id: str | None = None,
    ts: datetime | str | None = None,
) -> ErrorEntry:
    """A classified :class:`ErrorEntry`: ``code`` and ``hint`` from :func:`classify`, ``text``
    the message cut to 200 characters. ``error_info`` (Codex's ``codex_error_info``) helps
    classify but is not shown; an HTTP status in it counts like one in the message."""
    info = error_info_words(error_info)
    classified = classify(f"{message} ({info})" if info else message, exit_code)
    fields: dict[str, Any] = {
        "id": entry_id,
        "conversation": conversation,
        "text": shorten(message) or classified.code.value,
        "code": classified.code.value,
        "hint": classified.hint,
        "thread_id": thread_id,
        "turn_id": turn_id,
    }
    if error_info is not None:
        fields["codex_error_info"] = error_info
    if ts is not None:
        fields["ts"] = ts
    return ErrorEntry(**fields)
