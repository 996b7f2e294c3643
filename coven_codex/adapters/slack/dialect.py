"""Slack text, and a kit message as Block Kit blocks.

Model output (a reply, reasoning: ``Outgoing.markdown``) goes out in Slack's ``markdown`` block,
which takes standard Markdown and leaves the rendering to Slack (bold, italics, headings, lists,
tables, links, code blocks as the model wrote them); everything else (tool lines, the progress
card, notices) in ``section`` blocks of ``mrkdwn`` text. ``&``, ``<`` and ``>`` are escaped as
entities everywhere (Slack's rule for message text), so nothing the model or a user writes becomes
a mention (``<!channel>``) or a link by accident. :func:`blocks` lays a message out in blocks of at
most :data:`SECTION_LIMIT` characters and an ``actions`` block of buttons; the message's ``text``
(:func:`fallback_text`) is the plain-text fallback Slack shows in notifications, and the kit's
fallback for a refused ``markdown`` block posts the same text in sections.
"""

from __future__ import annotations

from typing import Any

from coven_codex.adapters.kit.platform import Button, Outgoing
from coven_codex.adapters.kit.render import PlainDialect

SECTION_LIMIT = 3000
"""The most characters of a ``section`` block's text (Block Kit reference)."""
MARKDOWN_LIMIT = 12000
"""The most characters of all ``markdown`` blocks of one message together (Block Kit reference)."""
MESSAGE_SOURCE_LIMIT = 2800
"""Markdown characters per message before escaping: escaping may lengthen it; :func:`blocks` cuts again."""
MAX_SECTIONS = 45
"""Sections per message at most (Slack allows 50 blocks; room for the buttons)."""
TEXT_LIMIT = 3900
"""Characters of the notification fallback ``text`` (Slack truncates past 40,000; keep it short)."""
BUTTON_PREFIX = "coven:"
"""The ``action_id`` prefix of the adapter's buttons; the button's ``value`` is the kit's command line."""

THREAD_MARK = "@"
"""In a ``/codex`` menu button's ``action_id``, what precedes the thread the button acts on."""
MENU = (Button("Cancel", "cancel"), Button("New session", "new"), Button("Status", "status"), Button("Help", "help"))
"""The buttons of the ``/codex`` menu."""


def escape(text: str) -> str:
    """``&``, ``<`` and ``>`` as Slack requires them (so nothing becomes a mention or a link by accident)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class SlackDialect(PlainDialect):
    """Slack: Markdown kept for the ``markdown`` block, escaped; a message holds at most
    :data:`MESSAGE_SOURCE_LIMIT` Markdown characters."""

    name = "slack"

    def __init__(self, limit: int = MESSAGE_SOURCE_LIMIT) -> None:
        super().__init__(limit=limit)

    def markdown(self, source: str) -> str:
        """Standard Markdown, escaped (Slack's ``markdown`` block renders it)."""
        return escape(source)

    def plain(self, text: str) -> str:
        """``text`` escaped."""
        return escape(text)

    def folded(self, summary: str, body: str) -> str:
        """The summary in italics, the body quoted (Slack cannot fold)."""
        quoted = "\n".join(f"&gt; {line}" for line in body.splitlines() or [""])
        return f"_{escape(summary)}_\n{quoted}"


def _sections(text: str) -> list[str]:
    """``text`` cut into pieces of at most :data:`SECTION_LIMIT` characters, at line ends where possible."""
    pieces: list[str] = []
    while len(text) > SECTION_LIMIT:
        cut = text.rfind("\n", SECTION_LIMIT // 2, SECTION_LIMIT)
        if cut < 0:
            cut = text.rfind(" ", SECTION_LIMIT // 2, SECTION_LIMIT)
        cut = SECTION_LIMIT if cut < 0 else cut + 1
        if "&" in text[cut - 5 : cut]:  # never cut an entity in two
            cut = text.rfind("&", cut - 5, cut)
        pieces.append(text[:cut])
        text = text[cut:]
    pieces.append(text)
    return [piece for piece in pieces if piece.strip()] or [" "]


def button(index: int, item: Button) -> dict[str, Any]:
    """One Block Kit button running the kit command ``item.action``."""
    element: dict[str, Any] = {
        "type": "button",
        "action_id": f"{BUTTON_PREFIX}{index}",
        "text": {"type": "plain_text", "text": item.label[:75]},
        "value": item.action[:2000],
    }
    if item.action.startswith("approve"):
        element["style"] = "primary"
    elif item.action.startswith(("deny", "cancel")):
        element["style"] = "danger"
    return element


def blocks(message: Outgoing) -> list[dict[str, Any]]:
    """``message`` as Block Kit: its text in ``markdown`` blocks (Markdown) or sections, its buttons in
    one ``actions`` block."""
    pieces = _sections(message.text)
    laid: list[dict[str, Any]]
    if message.markdown and sum(len(piece) for piece in pieces) <= MARKDOWN_LIMIT:
        laid = [{"type": "markdown", "text": piece} for piece in pieces]
    else:
        laid = [{"type": "section", "text": {"type": "mrkdwn", "text": piece}} for piece in pieces[:MAX_SECTIONS]]
    live = [item for item in message.buttons if not item.disabled]  # Block Kit has no disabled button
    if live:
        laid.append(
            {
                "type": "actions",
                "block_id": "coven_actions",
                "elements": [button(index, item) for index, item in enumerate(live)],
            }
        )
    return laid


def fallback_text(message: Outgoing) -> str:
    """The message's plain ``text`` (notifications, screen readers): its start."""
    text = message.text
    return text if len(text) <= TEXT_LIMIT else text[: TEXT_LIMIT - 1] + "…"


def menu(thread: str) -> list[dict[str, Any]]:
    """The ``/codex`` menu (shown only to the user who ran it): the commands as buttons for ``thread``."""
    elements = [
        dict(button(index, item), action_id=f"{BUTTON_PREFIX}{index}{THREAD_MARK}{thread}")
        for index, item in enumerate(MENU)
    ]
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": "Codex in your last thread here:"}},
        {"type": "actions", "block_id": "coven_menu", "elements": elements},
    ]
