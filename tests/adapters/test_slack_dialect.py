"""Slack mrkdwn and Block Kit layout (coven_codex/adapters/slack/dialect.py)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from coven_codex.adapters.kit.platform import Button, Outgoing
from coven_codex.adapters.kit.render import Block, format_block
from coven_codex.adapters.slack.dialect import SECTION_LIMIT, SlackDialect, blocks, escape, menu


def test_markdown_becomes_mrkdwn() -> None:
    dialect = SlackDialect()
    source = "# Title\n**bold** and __also__ ~~gone~~ [docs](https://example.com/a) `**kept**`\n"
    assert dialect.markdown(source) == "*Title*\n*bold* and *also* ~gone~ <https://example.com/a|docs> `**kept**`\n"


def test_code_blocks_keep_their_text_and_drop_the_language() -> None:
    dialect = SlackDialect()
    assert dialect.markdown("```python\nx = a < b and **c**\n```\nafter") == "```\nx = a &lt; b and **c**\n```\nafter"


def test_nothing_becomes_a_mention_or_a_link_by_accident() -> None:
    dialect = SlackDialect()
    assert dialect.markdown("<!channel> <@U123> <https://evil|ok> & co") == (
        "&lt;!channel&gt; &lt;@U123&gt; &lt;https://evil|ok&gt; &amp; co"
    )
    assert dialect.plain("<!here>") == "&lt;!here&gt;"


@given(st.text(alphabet="ab &<>\n", min_size=0, max_size=9000))
def test_sections_keep_every_character_within_slack_s_limit(text: str) -> None:
    escaped = escape(text)
    laid = blocks(Outgoing(escaped))
    sections = [block["text"]["text"] for block in laid if block["type"] == "section"]
    assert all(len(section) <= SECTION_LIMIT for section in sections)
    if escaped.strip():
        assert "".join(sections) == escaped
    for section in sections:  # no entity cut in two
        assert all(re.match(r"&(amp|lt|gt);", section[i:]) for i, c in enumerate(section) if c == "&")


def test_buttons_carry_the_kit_s_command_lines() -> None:
    laid = blocks(Outgoing("approval needed", buttons=(Button("Approve", "approve r1"), Button("Deny", "deny r1"))))
    actions = laid[-1]
    assert actions["type"] == "actions"
    assert [(e["value"], e.get("style")) for e in actions["elements"]] == [
        ("approve r1", "primary"),
        ("deny r1", "danger"),
    ]
    assert len({e["action_id"] for e in actions["elements"]}) == 2
    assert {e["action_id"].rpartition("@")[2] for e in menu("17.5")[-1]["elements"]} == {"17.5"}


def test_a_long_reply_is_cut_into_messages_the_dialect_can_hold() -> None:
    texts = format_block(Block("response", "word " * 2000, markdown=True, label="codex:"), SlackDialect())
    assert len(texts) >= 4 and all(len(text) <= 3000 for text in texts)
