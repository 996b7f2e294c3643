"""Rendering: journal entries → a platform-neutral :class:`Block` → the platform's dialect.

:func:`render_entry` decides *what* an entry shows (a reply in Markdown, a collapsed reasoning
summary, ``→ coven.add(a=2, b=3)`` / ``← 5`` for a tool call and its result, an error with its
hint, an approval request with Approve/Deny buttons). A :class:`Dialect` decides *how*: plain
text, ANSI colours for the console, HTML for the web page; Slack mrkdwn and Discord Markdown
implement the same four methods.

:func:`format_block` turns a block into the texts to post: its Markdown source is cut at the
dialect's ``limit`` (:func:`~coven_codex.adapters.kit.split.split_message`, on the source, so a
dialect whose conversion changes lengths sets its limit with a margin) and each part converted.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from coven_codex.adapters.kit.split import split_message
from coven_codex.entries import (
    ActivityEntry,
    ApprovalEntry,
    ApprovalRequestEntry,
    BaseEntry,
    CancelEntry,
    ErrorEntry,
    FileEntry,
    ReasoningEntry,
    ResetEntry,
    ResponseEntry,
    SettingsEntry,
    StatusEntry,
    ThoughtEntry,
    ToolCallEntry,
    ToolResultEntry,
)

if TYPE_CHECKING:
    from markdown_it import MarkdownIt

TOOL_TEXT_LIMIT = 400
"""Characters of tool arguments or output shown; the rest is cut with an ellipsis."""

QUIET_STATES = frozenset(
    {"turn_started", "turn_completed", "session_started", "session_resumed", "session_waiting", "session_ended"}
)
"""Statuses a chat shows as its typing indicator only (unless ``show_status``)."""


@dataclass(frozen=True, slots=True)
class Action:
    """A button of a block: its label and the command line pressing it runs."""

    label: str
    command: str


@dataclass(frozen=True, slots=True)
class Block:
    """What one entry shows, independent of any platform.

    ``body`` is Markdown when ``markdown`` is True (replies, reasoning), else plain text.
    ``label`` is a short plain prefix (``codex:``, ``ann>``) and ``hint`` a plain line after the
    body (an error's hint). ``collapsed`` blocks (reasoning) are shown folded where possible.
    """

    style: str
    body: str
    markdown: bool = False
    label: str = ""
    hint: str = ""
    actions: tuple[Action, ...] = ()
    collapsed: bool = False


class Dialect(Protocol):
    """How a platform writes text. Slack mrkdwn and Discord Markdown implement the same methods."""

    name: str
    limit: int | None
    """The most characters one message may hold (None: no limit)."""

    def markdown(self, source: str) -> str:
        """Markdown source in this dialect."""
        ...

    def plain(self, text: str) -> str:
        """Plain text, escaped for this dialect."""
        ...

    def styled(self, style: str, text: str) -> str:
        """Already converted ``text`` marked as ``style`` (a colour, a CSS class, nothing)."""
        ...

    def folded(self, summary: str, body: str) -> str:
        """``body`` (converted) collapsed under a plain ``summary``."""
        ...


@runtime_checkable
class PreparesSource(Protocol):
    """A dialect that rewrites Markdown before it is split (Discord: tables as code blocks).

    :func:`format_block` calls :meth:`prepare` on a Markdown body first, so that what it adds is
    counted by the splitter (and a code block it makes is closed and reopened across parts).
    """

    def prepare(self, source: str) -> str:
        """``source`` rewritten, still Markdown."""
        ...


class PlainDialect:
    """Plain text: Markdown is kept as written (it reads well as is)."""

    name = "plain"

    def __init__(self, limit: int | None = None) -> None:
        self.limit = limit

    def markdown(self, source: str) -> str:
        """Markdown stays Markdown."""
        return source

    def plain(self, text: str) -> str:
        """Nothing to escape."""
        return text

    def styled(self, style: str, text: str) -> str:
        """No styles in plain text."""
        return text

    def folded(self, summary: str, body: str) -> str:
        """Folding is shown as a parenthesised summary before the body."""
        return f"({summary}) {body}"


RESET = "\x1b[0m"
ANSI_STYLES = {
    "thought": "\x1b[1;36m",  # bold cyan
    "response": "\x1b[1;37m",  # bold white
    "reasoning": "\x1b[2;3m",  # dim italic
    "tool_call": "\x1b[33m",  # yellow
    "tool_result": "\x1b[32m",  # green
    "tool_error": "\x1b[31m",  # red
    "status": "\x1b[2m",  # dim
    "error": "\x1b[1;31m",  # bold red
    "approval_request": "\x1b[1;35m",  # bold magenta
    "activity": "\x1b[36m",  # cyan
    "other": "\x1b[2m",
}


class AnsiDialect(PlainDialect):
    """Plain text with a colour per style, for a terminal."""

    name = "ansi"

    def styled(self, style: str, text: str) -> str:
        """``text`` in the style's colour (terminal escape codes)."""
        return f"{ANSI_STYLES.get(style, ANSI_STYLES['other'])}{text}{RESET}"


class HtmlDialect:
    """HTML for a web page: CommonMark via markdown-it-py with raw HTML disabled.

    Every text from the journal is escaped; Markdown cannot inject tags (``html`` is off) and
    links keep markdown-it's URL validation (no ``javascript:``). Needs the ``web`` extra
    (``pip install 'coven-codex[web]'``).
    """

    name = "html"

    def __init__(self, limit: int | None = None) -> None:
        self.limit = limit
        try:
            from markdown_it import MarkdownIt  # noqa: PLC0415 - only HTML adapters need it
        except ImportError:
            raise RuntimeError("the HTML dialect needs markdown-it-py: pip install 'coven-codex[web]'") from None
        self._md: MarkdownIt = MarkdownIt("commonmark", {"html": False}).enable("table").enable("strikethrough")

    def markdown(self, source: str) -> str:
        """Markdown rendered to HTML (raw HTML in the source is shown as text)."""
        rendered: str = self._md.render(source)
        return rendered

    def plain(self, text: str) -> str:
        """``text`` escaped."""
        return html.escape(text)

    def styled(self, style: str, text: str) -> str:
        """``text`` in a ``<span class="coven-STYLE">``."""
        return f'<span class="coven-{html.escape(style)}">{text}</span>'

    def folded(self, summary: str, body: str) -> str:
        """A closed ``<details>`` element."""
        return f"<details><summary>{html.escape(summary)}</summary>{body}</details>"


class RenderMode(StrEnum):
    """How much of a turn a chat shows as messages (an adapter's ``render`` setting)."""

    QUIET = "quiet"
    """One progress card per turn, edited in place (:mod:`~coven_codex.adapters.kit.card`), then the
    reply as a message of its own; approvals and errors stay messages."""
    VERBOSE = "verbose"
    """Every tool call, result and activity a message of its own; replies streamed by edits."""


@dataclass(frozen=True, slots=True)
class RenderOptions:
    """Choices per adapter: quiet or verbose, show reasoning, lifecycle statuses, other senders' thoughts."""

    show_reasoning: bool = True
    show_status: bool = False
    show_thoughts: bool = False
    mode: RenderMode = RenderMode.VERBOSE


def clip(text: str, limit: int = TOOL_TEXT_LIMIT) -> str:
    """``text`` cut to ``limit`` characters, the cut marked with an ellipsis."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def format_arguments(arguments: object) -> str:
    """Tool arguments compactly: ``a=2, b=3`` for an object, else its JSON."""
    if arguments is None:
        return ""
    if isinstance(arguments, str):
        try:
            decoded: object = json.loads(arguments)
        except ValueError:
            return arguments
        arguments = decoded
    if isinstance(arguments, dict):
        return ", ".join(f"{key}={json.dumps(value, ensure_ascii=False)}" for key, value in arguments.items())
    return json.dumps(arguments, ensure_ascii=False)


def approval_actions(request_id: str) -> tuple[Action, ...]:
    """The Approve, Approve for session and Deny buttons of an approval request."""
    return (
        Action("Approve", f"approve {request_id}"),
        Action("Approve for session", f"approve-session {request_id}"),
        Action("Deny", f"deny {request_id}"),
    )


DECIDED = {"approve": "approved", "approve_for_session": "approved for the session", "deny": "denied"}
"""How an approval request's message says what was decided, by the journal's ``decision``."""


ACTIVITY_LABELS: dict[str, str] = {
    "plan": "plan",
    "web_search": "web search",
    "compaction": "compacted",
    "user_shell": "shell",
    "patch": "patch",
    "image": "image",
    "review": "review",
    "subagent": "sub-agent",
}
"""The short label each known ``activity`` is shown under; others show their own name."""


def render_activity(entry: ActivityEntry) -> Block:
    """An ``activity`` compactly: a plan as Markdown under a label, anything else as one
    ``[label] text`` line."""
    label = ACTIVITY_LABELS.get(entry.activity, entry.activity.replace("_", " "))
    if entry.activity == "plan":
        return Block("activity", entry.text, markdown=True, label=f"{label}:")
    return Block("activity", f"[{label}] {clip(entry.text)}" if entry.text else f"[{label}]")


def render_entry(entry: BaseEntry, options: RenderOptions = RenderOptions()) -> Block | None:
    """What ``entry`` shows in a chat, or None when it shows nothing (deltas, quiet statuses)."""
    match entry:
        case ResponseEntry():
            return Block("response", entry.text, markdown=True, label="codex:")
        case ReasoningEntry():
            if not options.show_reasoning:
                return None
            return Block("reasoning", entry.text, markdown=True, label="thinking", collapsed=True)
        case ToolCallEntry():
            return Block("tool_call", f"→ {entry.tool}({clip(format_arguments(entry.arguments))})")
        case ToolResultEntry():
            if entry.is_error:
                return Block("tool_error", f"✗ {entry.tool + ': ' if entry.tool else ''}{clip(entry.text)}")
            return Block("tool_result", f"← {clip(entry.text)}")
        case StatusEntry():
            if entry.state in QUIET_STATES and not options.show_status:
                return None
            label = entry.state.replace("_", " ")
            text = entry.text
            if text.lower().startswith(label):  # "turn failed: RATE_LIMIT" under turn_failed
                text = text[len(label) :].lstrip(" :")
            detail = f": {text}" if text else ""
            return Block("status", f"[{label}{detail}]")
        case ErrorEntry():
            return Block("error", f"error {entry.code}: {entry.text}", hint=entry.hint)
        case ApprovalRequestEntry():
            return Block(
                "approval_request",
                f"approval needed [{entry.request_id}]: {entry.action or entry.text}",
                actions=approval_actions(entry.request_id),
            )
        case ThoughtEntry():
            if not options.show_thoughts:
                return None
            return Block("thought", entry.text, markdown=True, label=f"{entry.sender}>")
        case ApprovalEntry():
            return Block("status", f"[{entry.sender} answered {entry.decision} to {entry.request_id}]")
        case CancelEntry():
            return Block("status", f"[{entry.sender} asked to cancel the turn]")
        case ResetEntry():
            return Block("status", f"[{entry.sender} started a new session]")
        case SettingsEntry():
            asked = "; ".join(f"{name} {value}" for name, value in entry.change.model_dump().items() if value)
            return Block("status", f"[{entry.sender} asked for {asked or 'the settings'}]")
        case ActivityEntry():
            return render_activity(entry)
        case FileEntry():
            name = entry.attachment.name or "a file"
            return Block("file", f"[file {name}]{': ' + entry.text if entry.text else ''}")
    if entry.kind == "delta":
        return None
    return Block("other", f"[{entry.kind}] {entry.text}")


def format_block(block: Block, dialect: Dialect) -> list[str]:
    """The texts to post for ``block`` in ``dialect``: one, or several when it exceeds the limit."""
    label = f"{block.label} " if block.label else ""
    hint = f"\nhint: {clip(block.hint)}" if block.hint else ""
    overhead = len(label) + len(hint) + (len(block.label) + 3 if block.collapsed else 0)
    limit = None if dialect.limit is None else max(dialect.limit - overhead, 32)
    body = dialect.prepare(block.body) if block.markdown and isinstance(dialect, PreparesSource) else block.body
    sources = [part.text for part in split_message(body, limit)] if limit is not None else [body]
    texts: list[str] = []
    for index, source in enumerate(sources):
        body = dialect.markdown(source) if block.markdown else dialect.plain(source)
        if block.collapsed:
            body = dialect.folded(block.label, body)
        elif label and index == 0:
            body = dialect.styled(block.style, dialect.plain(label)) + body
        if hint and index == len(sources) - 1:
            body += dialect.styled("status", dialect.plain(hint))
        texts.append(body if label or block.collapsed else dialect.styled(block.style, body))
    return texts
