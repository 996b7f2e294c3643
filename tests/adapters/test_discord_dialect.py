"""Discord Markdown (coven_codex/adapters/discord/platform.py): tables as aligned code blocks, fence-safe splits."""

from __future__ import annotations

from coven_codex.adapters.discord.platform import DiscordDialect, tables_as_code
from coven_codex.adapters.kit.render import Block, format_block


def test_a_table_becomes_an_aligned_code_block_and_code_blocks_stay_as_they_are() -> None:
    table = "| name | size |\n|:---|---:|\n| a.txt | 12 |\n| longer.bin | 4096 |"
    source = f"sizes:\n\n{table}\n\nafter\n```\n| x | y |\n|---|---|\n```"
    assert tables_as_code(source) == (
        "sizes:\n\n```\nname       | size\n-----------+-----\na.txt      | 12\nlonger.bin | 4096\n```\n\nafter\n"
        "```\n| x | y |\n|---|---|\n```"
    )
    assert tables_as_code("a | b without a rule\nplain") == "a | b without a rule\nplain"


def test_a_long_table_is_split_inside_its_code_block_within_discord_s_limit() -> None:
    rows = "\n".join(f"| row {n:03} | {'v' * 30} |" for n in range(200))
    texts = format_block(
        Block("response", f"| k | v |\n|---|---|\n{rows}", markdown=True, label="codex:"), DiscordDialect()
    )
    assert len(texts) >= 4 and all(len(text) <= 2000 for text in texts)
    assert all(text.count("```") % 2 == 0 for text in texts)  # every part's code block closed, reopened in the next
    assert "|---|" not in "".join(texts) and "".join(texts).count("row 199") == 1
