"""Slack mrkdwn, and a kit message as Block Kit blocks.

Slack's ``mrkdwn`` is not Markdown: bold is ``*x*``, links are ``<url|text>``, there are no
headings, and ``&``, ``<``, ``>`` must be escaped as entities everywhere. :class:`SlackDialect`
converts the kit's Markdown line by line (code blocks are kept, their language dropped: Slack shows
it as text). :func:`blocks` lays a message out as ``section`` blocks of at most
:data:`SECTION_LIMIT` characters (Slack refuses longer ones) and an ``actions`` block of buttons.
"""

from __future__ import annotations

import re
from typing import Any

from coven_codex.adapters.kit.platform import Button, Outgoing
from coven_codex.adapters.kit.render import PlainDialect

SECTION_LIMIT = 3000
"""The most characters of a ``section`` block's text (Block Kit reference)."""
MESSAGE_SOURCE_LIMIT = 2800
"""Markdown characters per message before conversion: escaping may lengthen it; :func:`blocks` cuts again."""
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

_FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|__(?=\S)(.+?)(?<=\S)__")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_LINK = re.compile(r"\[([^\]\n]+)\]\((https?://[^)\s]+)\)")
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def escape(text: str) -> str:
    """``&``, ``<`` and ``>`` as Slack requires them (so nothing becomes a mention or a link by accident)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _inline(line: str) -> str:
    """One line outside code: bold, strike-through, links; code spans untouched."""
    pieces: list[str] = []
    last = 0
    for match in _CODE_SPAN.finditer(line):
        pieces.append(_styled(line[last : match.start()]))
        pieces.append(match.group(0))
        last = match.end()
    pieces.append(_styled(line[last:]))
    return "".join(pieces)


def _styled(text: str) -> str:
    text = _LINK.sub(lambda m: f"<{m.group(2)}|{m.group(1).replace('|', '¦')}>", text)
    text = _BOLD.sub(lambda m: f"*{m.group(1) or m.group(2)}*", text)
    return _STRIKE.sub(lambda m: f"~{m.group(1)}~", text)


class SlackDialect(PlainDialect):
    """Slack mrkdwn; a message holds at most :data:`MESSAGE_SOURCE_LIMIT` Markdown characters."""

    name = "slack"

    def __init__(self, limit: int = MESSAGE_SOURCE_LIMIT) -> None:
        super().__init__(limit=limit)

    def markdown(self, source: str) -> str:
        """Markdown as mrkdwn (see the module docstring)."""
        out: list[str] = []
        fence: str | None = None
        for raw in escape(source).split("\n"):
            match = _FENCE.match(raw)
            if fence is None:
                if match is not None:
                    fence = match.group(2)
                    out.append("```")
                    continue
                heading = _HEADING.match(raw)
                out.append(f"*{_inline(heading.group(1))}*" if heading else _inline(raw))
            else:
                if match is not None and match.group(2)[0] == fence[0] and len(match.group(2)) >= len(fence):
                    fence = None
                    out.append("```")
                    continue
                out.append(raw)
        return "\n".join(out)

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
    """``message`` as Block Kit: its text in sections, its buttons in one ``actions`` block."""
    laid: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": piece}}
        for piece in _sections(message.text)[:MAX_SECTIONS]
    ]
    if message.buttons:
        laid.append(
            {
                "type": "actions",
                "block_id": "coven_actions",
                "elements": [button(index, item) for index, item in enumerate(message.buttons)],
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
