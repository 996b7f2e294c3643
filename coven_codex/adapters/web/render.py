"""Journal entries as the page shows them: typed wire entries with sanitised HTML.

Markdown is rendered here, on the server, by the adapter kit's HTML dialect (``markdown-it-py``
with raw HTML disabled), so what the page inserts as HTML is produced by the renderer (every
character of user or model text is escaped; links with ``javascript:`` and similar schemes are
dropped by its link check). Text that is not Markdown (tool arguments and output, statuses) is
sent as plain text and the page sets it with ``textContent``.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from pydantic import BaseModel

from coven_codex.adapters.kit.render import HtmlDialect, RenderOptions, render_entry
from coven_codex.attachments import OUT_FOLDER, SENT_NAME
from coven_codex.entries import (
    ApprovalEntry,
    ApprovalRequestEntry,
    BaseEntry,
    ConversationSettings,
    DeltaEntry,
    ErrorEntry,
    FileEntry,
    StatusEntry,
    ThoughtEntry,
    ToolCallEntry,
    ToolResultEntry,
)

MARKDOWN_LIMIT = 200_000
"""Characters of a reply rendered as Markdown; the rest is cut (the journal keeps it whole)."""
TEXT_LIMIT = 8_000
"""Characters of tool arguments, tool output and other plain text sent to the page."""
MARKDOWN_KINDS = frozenset({"thought", "response", "reasoning"})

_HTML = HtmlDialect()
_SHOW_ALL = RenderOptions(show_reasoning=True, show_status=True, show_thoughts=True)


def markdown_html(text: str) -> str:
    """``text`` as Markdown rendered to HTML; raw HTML in it comes out escaped."""
    if len(text) > MARKDOWN_LIMIT:
        text = text[:MARKDOWN_LIMIT] + "\n\n…"
    return _HTML.markdown(text)


def clip(text: str, limit: int = TEXT_LIMIT) -> str:
    """``text`` cut to ``limit`` characters, with an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


class WireFile(BaseModel):
    """A file Codex sent, as the page links it (files out)."""

    url: str
    name: str
    size: int


class WireEntry(BaseModel):
    """One journal entry as the page receives it (keyed by ``id``; ordered by ``start``)."""

    id: str
    kind: str
    conversation: str
    sender: str
    ts: str
    start: int
    end: int
    html: str = ""
    """Sanitised HTML rendered from Markdown (thoughts, replies, reasoning)."""
    text: str = ""
    """Plain text, inserted with ``textContent``."""
    tool: str | None = None
    call_id: str | None = None
    is_error: bool = False
    state: str | None = None
    code: str | None = None
    hint: str | None = None
    request_id: str | None = None
    decision: str | None = None
    item_id: str | None = None
    stream: str | None = None
    """A delta: the stream it grows (the id of the stream's first delta; the kit's stream logic)."""
    replaces: str | None = None
    """A reply: the stream it completes (the page replaces that stream's bubble with it)."""
    closes: list[str] = []
    """A turn's end or an error: the streams it closes as they are (no reply completed them)."""
    images: list[str] = []
    """URLs (on this server) of the images a thought carries."""
    file: WireFile | None = None
    """A file Codex sent (a ``file`` entry): where this server serves it, its name and size."""
    settings: ConversationSettings | None = None
    """A ``settings`` status: the conversation's settings (``/status`` shows them)."""


def wire_entry(entry: BaseEntry, start: int, end: int, uploads: Path | None = None) -> WireEntry:
    """The wire form of ``entry`` (which has an id), read at ``start``..``end``.

    ``uploads`` is the folder of stored images: attachments stored there become image URLs.
    """
    wire = WireEntry(
        id=entry.id or f"@{start}",
        kind=entry.kind,
        conversation=entry.conversation,
        sender=entry.sender,
        ts=entry.ts.isoformat().replace("+00:00", "Z"),
        start=start,
        end=end,
    )
    if entry.kind in MARKDOWN_KINDS:
        wire.html = markdown_html(entry.text)
    elif isinstance(entry, DeltaEntry):
        wire.text = entry.text
        wire.item_id = entry.item_id
    else:
        block = render_entry(entry, _SHOW_ALL)  # the kit's wording, the same in every chat
        wire.text = clip(block.body if block is not None else entry.text)
    match entry:
        case ThoughtEntry(attachments=attachments) if attachments and uploads is not None:
            folder = uploads.as_uri() + "/"
            wire.images = [
                f"/attachments/{a.url[len(folder) :]}"
                for a in attachments
                if a.url.startswith(folder) and "/" not in a.url[len(folder) :]
            ]
        case FileEntry(attachment=attachment) if uploads is not None:
            folder = (uploads / OUT_FOLDER).as_uri() + "/"
            stored = attachment.url[len(folder) :]
            if attachment.url.startswith(folder) and SENT_NAME.match(stored):
                size = getattr(attachment, "size", 0)
                name = attachment.name or stored
                wire.file = WireFile(
                    url=f"/files/{stored}?name={quote(name)}", name=name, size=size if isinstance(size, int) else 0
                )
        case ToolCallEntry():
            wire.tool, wire.call_id = entry.tool, entry.call_id
        case ToolResultEntry():
            wire.tool, wire.call_id, wire.is_error = entry.tool, entry.call_id, entry.is_error
        case StatusEntry():
            wire.state, wire.settings = entry.state, entry.settings
        case ErrorEntry():
            wire.code, wire.hint = entry.code, clip(entry.hint, 1000)
        case ApprovalRequestEntry():
            wire.request_id, wire.call_id = entry.request_id, entry.call_id
        case ApprovalEntry():
            wire.request_id, wire.decision = entry.request_id, entry.decision
    return wire
