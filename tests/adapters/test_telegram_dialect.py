"""Telegram HTML: whatever the journal holds, every part the kit posts is HTML Telegram accepts
(checked with the fake Bot API's parser, built from the reference), within its limit, and its plain
text is what Telegram shows."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from telegram_fake import LIMIT, parse_html, utf16

from coven_codex.adapters.kit.render import Block, format_block
from coven_codex.adapters.telegram.dialect import TelegramDialect, to_plain

MARKUP = st.sampled_from(
    [
        "**",
        "__",
        "~~",
        "`",
        "```",
        "```python",
        "\n",
        "# ",
        "[a](https://x.y/?a=1&b=2)",
        "<b>",
        "</i>",
        "&",
        "&amp;",
        '"',
        "<",
        ">",
        "*",
        "_",
    ]
)
TEXT = st.lists(st.one_of(MARKUP, st.text(max_size=12)), max_size=60).map("".join)


@settings(max_examples=300, deadline=None)
@given(TEXT)
def test_every_part_of_any_reply_is_html_telegram_accepts(text: str) -> None:
    dialect = TelegramDialect(500)
    for style, markdown, collapsed in (
        ("response", True, False),
        ("reasoning", True, True),
        ("tool_call", False, False),
    ):
        block = Block(
            style, text, markdown=markdown, label="codex:" if not collapsed else "thinking", collapsed=collapsed
        )
        for part in format_block(block, dialect):
            shown = parse_html(part)
            assert shown == to_plain(part)
            assert utf16(shown) <= LIMIT


def test_markdown_becomes_telegrams_tags_and_text_stays_text() -> None:
    html = TelegramDialect().markdown(
        "# Title\n**bold** <script> & `a<b` [link](https://a.b/?q=1&r=2)\n```python\nif a < b:\n    pass\n```"
    )
    assert html == (
        "<b>Title</b>\n<b>bold</b> &lt;script&gt; &amp; <code>a&lt;b</code>"
        ' <a href="https://a.b/?q=1&amp;r=2">link</a>\n'
        '<pre><code class="language-python">if a &lt; b:\n    pass</code></pre>'
    )
    assert parse_html(html) == "Title\nbold <script> & a<b link\nif a < b:\n    pass"
