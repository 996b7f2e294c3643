"""What ingress accepts, and how names and texts are cut for log lines.

A thought that can never be answered (a conversation name, id or text beyond these limits)
is refused at ingress with one ``error`` entry instead of crashing its session over and over
(every daemon entry carries the conversation name; a 16 MiB name makes every one of them
longer than the journal's line limit). The limits are documented in
``docs/journal-protocol.md`` ("Limits"); a test keeps that table equal to these values.
"""

from __future__ import annotations

MAX_CONVERSATION_CHARS = 256
"""Longest conversation name the daemon serves."""

MAX_ID_CHARS = 256
"""Longest ``id`` of a thought, cancel or approval (and ``request_id`` of an approval)."""

MAX_THOUGHT_CHARS = 1_048_576
"""Longest thought text. Codex 0.169 refuses user input over 2**20 characters ("Input exceeds the
maximum length of 1048576 characters", as an error of ``turn/start``, which it never records);
0.47's exec passes such input on to the model."""

REFUSED_CODE = "REFUSED"
"""The ``code`` of the ``error`` entry for a thought the daemon will not hand to Codex (over a
limit, or reusing an earlier thought's id)."""

LOG_TEXT_CHARS = 60
"""Names and texts are cut to this many characters in log lines."""


def cut(text: str, limit: int = LOG_TEXT_CHARS) -> str:
    """``text`` cut to ``limit`` characters (with an ellipsis and the full length when cut)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…({len(text)} chars)"
