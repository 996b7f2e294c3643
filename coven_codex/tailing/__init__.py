"""One event-driven line tailer for the journal and the rollout egress (docs/architecture.md)."""

from coven_codex.tailing.lines import DEFAULT_MAX_LINE_BYTES, Line, LineSplitter
from coven_codex.tailing.notices import TailNotice, TailNoticeKind
from coven_codex.tailing.tailer import TailError, WakerFactory, tail_lines, watch_target
from coven_codex.tailing.wakers import DEFAULT_POLL_INTERVAL, NotifierKind

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "DEFAULT_POLL_INTERVAL",
    "Line",
    "LineSplitter",
    "NotifierKind",
    "TailError",
    "TailNotice",
    "TailNoticeKind",
    "WakerFactory",
    "tail_lines",
    "watch_target",
]
