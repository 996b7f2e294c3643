"""Slack text and Block Kit layout (coven_codex/adapters/slack/dialect.py): markdown blocks, sections, buttons."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from coven_codex.adapters.kit.platform import Button, Outgoing
from coven_codex.adapters.kit.render import Block, format_block
from coven_codex.adapters.slack.dialect import SECTION_LIMIT, SlackDialect, blocks, escape, menu


def test_model_output_goes_out_as_markdown_in_markdown_blocks_and_the_rest_in_sections() -> None:
    dialect = SlackDialect()
    source = "# Title\n**bold**, *italic*, ~~gone~~ [docs](https://example.com/a)\n\n| a | b |\n|---|---|\n| 1 | 2 |\n"
    assert dialect.markdown(source) == source  # no conversion by line regexes: Slack renders standard Markdown
    (reply,) = format_block(Block("response", source, markdown=True, label="codex:"), dialect)
    assert blocks(Outgoing(reply, markdown=True)) == [{"type": "markdown", "text": "codex: " + source}]
    assert blocks(Outgoing("→ tool(a=1)", style="tool_call"))[0]["type"] == "section"
    code = dialect.markdown("```python\nx = a < b and **c**\n```\nafter")
    assert code == "```python\nx = a &lt; b and **c**\n```\nafter"


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


def test_markdown_over_the_block_limit_falls_back_to_sections() -> None:
    text = "x" * 12001
    laid = blocks(Outgoing(text, markdown=True))
    assert {block["type"] for block in laid} == {"section"} and "".join(b["text"]["text"] for b in laid) == text
