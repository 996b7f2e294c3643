"""Telegram's HTML parse mode, and the way back to plain text.

Telegram's ``HTML`` parse mode takes a few tags (``b``, ``i``, ``s``, ``code``, ``pre``, ``a``,
``blockquote``) and the entities ``&lt;``, ``&gt;``, ``&amp;``, ``&quot;``; anything else in the
text makes the message fail with "can't parse entities". :class:`TelegramDialect` converts the
kit's Markdown line by line after escaping everything (so no text from the journal can open a
tag): fenced code becomes ``<pre><code>``, code spans ``<code>``, ``**bold**`` and headings
``<b>``, ``~~strike~~`` ``<s>``, ``[text](https://…)`` links ``<a href>``. A part always closes
what it opened. Should Telegram still refuse the markup, :func:`to_plain` gives the text without
tags, sent with no parse mode at all (a reply never fails to send for its formatting).

Telegram counts a message's length after the markup is parsed, in UTF-16 code units (4,096 at
most): the kit splits the Markdown source at :data:`SOURCE_LIMIT` characters, which the shown
text never exceeds (the markup only shrinks it), except for characters outside the BMP, which
count twice; such a message is refused as too long and the kit sends it in smaller parts.
"""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

from coven_codex.adapters.kit.render import PlainDialect

MESSAGE_LIMIT = 4096
"""Telegram's most characters (UTF-16 code units, after parsing) in one message."""
SOURCE_LIMIT = 4000
"""Markdown characters per message before conversion (room for the label and a hint)."""

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*).*$")
# A style's content holds no tag (a ``<`` or ``>`` there is one the conversion wrote; the text's are
# escaped): styles nest inside links and code, never across another style's tags.
_BOLD = re.compile(r"\*\*(?=[^\s<>])([^<>]+?)(?<=[^\s<>])\*\*|__(?=[^\s<>])([^<>]+?)(?<=[^\s<>])__")
_STRIKE = re.compile(r"~~(?=[^\s<>])([^<>]+?)(?<=[^\s<>])~~")
_LINK = re.compile(r"\[([^\]\n<>]+)\]\((https?://[^)\s\"<>]+)\)")
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def escape(text: str) -> str:
    """``text`` with ``&``, ``<``, ``>`` and ``"`` as entities: nothing in it can be read as markup."""
    return html.escape(text, quote=True)


def _styled(text: str) -> str:
    text = _LINK.sub(lambda m: f'<a href="{m.group(2)}">{m.group(1)}</a>', text)
    text = _BOLD.sub(lambda m: f"<b>{m.group(1) or m.group(2)}</b>", text)
    return _STRIKE.sub(lambda m: f"<s>{m.group(1)}</s>", text)


def _inline(line: str) -> str:
    """One escaped line outside code: links, bold, strike-through; code spans as ``<code>``."""
    heading = _HEADING.match(line)
    if heading is not None:
        return f"<b>{_inline(heading.group(1))}</b>" if heading.group(1) else ""
    pieces: list[str] = []
    last = 0
    for match in _CODE_SPAN.finditer(line):
        pieces.append(_styled(line[last : match.start()]))
        pieces.append(f"<code>{match.group(2)}</code>")
        last = match.end()
    pieces.append(_styled(line[last:]))
    return "".join(pieces)


class TelegramDialect(PlainDialect):
    """Telegram HTML (see the module docstring); ``limit`` Markdown characters a message."""

    name = "telegram"

    def __init__(self, limit: int = SOURCE_LIMIT) -> None:
        super().__init__(limit=limit)

    def markdown(self, source: str) -> str:
        """Markdown as Telegram HTML; every tag opened is closed in the same text."""
        out: list[str] = []
        fence: str | None = None
        for raw in source.split("\n"):
            match = _FENCE.match(raw)
            if fence is None:
                if match is not None:
                    fence = match.group(1)
                    language = match.group(2)
                    out.append(f'<pre><code class="language-{escape(language)}">' if language else "<pre><code>")
                    continue
                out.append(_inline(escape(raw)))
            elif match is not None and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence):
                fence = None
                out[-1] = out[-1] + "</code></pre>" if out else "</code></pre>"
            else:
                out.append(escape(raw))
        if fence is not None:
            out[-1] = out[-1] + "</code></pre>"
        return _join_code("\n".join(out))

    def plain(self, text: str) -> str:
        """``text`` escaped for HTML."""
        return escape(text)

    def folded(self, summary: str, body: str) -> str:
        """The summary in bold, the body in an expandable quote (collapsed in Telegram's apps)."""
        return f"<b>{escape(summary)}</b>\n<blockquote expandable>{body}</blockquote>"


def _join_code(text: str) -> str:
    """``<pre><code>`` directly followed by its first line (the newline after the fence is not code)."""
    return re.sub(r'(<pre><code(?: class="[^"]*")?>)\n', r"\1", text)


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def to_plain(text: str) -> str:
    """What a Telegram HTML ``text`` shows, as plain text (tags dropped, entities decoded)."""
    parser = _Text()
    parser.feed(text)
    parser.close()
    return "".join(parser.parts)


def utf16_length(text: str) -> int:
    """``text``'s length as Telegram counts it (UTF-16 code units)."""
    return len(text.encode("utf-16-le")) // 2
