"""What ingress accepts, and how names and texts are cut for log lines.

A thought that can never be answered (a conversation name, id or text beyond these limits)
is refused at ingress with one ``error`` entry instead of crashing its session over and over
(every daemon entry carries the conversation name; a 16 MiB name makes every one of them
longer than the journal's line limit). The limits are documented in
``docs/journal-protocol.md`` ("Limits"); a test keeps that table equal to these values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MAX_CONVERSATION_CHARS = 256
"""Longest conversation name the daemon serves."""

MAX_ID_CHARS = 256
"""Longest ``id`` of a thought, cancel or approval (and ``request_id`` of an approval)."""

MAX_THOUGHT_CHARS = 1_048_576
"""Longest thought text. Codex 0.169 refuses user input over 2**20 characters ("Input exceeds the
maximum length of 1048576 characters", as an error of ``turn/start``, which it never records);
0.47's exec passes such input on to the model."""
MAX_MODEL_CHARS = 200
"""The longest ``model`` name (and Codex thread id) a thought or a job may give."""

REFUSED_CODE = "REFUSED"
"""The ``code`` of the ``error`` entry for a thought the daemon will not hand to Codex (over a
limit, or reusing an earlier thought's id)."""


@dataclass(frozen=True, slots=True)
class OverLimit:
    """Which field of a thought is over its limit, how long it is, and the limit."""

    field: Literal["conversation", "id", "text"]
    length: int
    limit: int


def over_limit(conversation: str, entry_id: str | None, text: str) -> OverLimit | None:
    """The first field of a thought over its limit (conversation, id, text), or ``None``: what
    ingress refuses, and what the jobs clients check before they write a thought."""
    if len(conversation) > MAX_CONVERSATION_CHARS:
        return OverLimit("conversation", len(conversation), MAX_CONVERSATION_CHARS)
    if entry_id is not None and len(entry_id) > MAX_ID_CHARS:
        return OverLimit("id", len(entry_id), MAX_ID_CHARS)
    if len(text) > MAX_THOUGHT_CHARS:
        return OverLimit("text", len(text), MAX_THOUGHT_CHARS)
    return None


LOG_TEXT_CHARS = 60
"""Names and texts are cut to this many characters in log lines."""


def cut(text: str, limit: int = LOG_TEXT_CHARS) -> str:
    """``text`` cut to ``limit`` characters (with an ellipsis and the full length when cut)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…({len(text)} chars)"
