"""docs/adapters.md's Discord section says what the code does: slash commands, intents, keys."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from coven_codex.adapters.discord.gateway import SLASH_COMMANDS, intents
from coven_codex.adapters.kit.config import AdapterSection, DiscordSection, parse_section

DOC = (Path(__file__).resolve().parents[2] / "docs" / "adapters.md").read_text(encoding="utf-8")
SECTION = DOC[DOC.index("## Discord (`coven-codex discord`)") : DOC.index("## What each adapter supports")]


def test_the_slash_command_table_is_the_registered_commands() -> None:
    rows = re.findall(r"^\| `/(\w+)[^`]*` \| (.+?) \|$", SECTION, flags=re.M)
    assert rows == [(command.name, command.description) for command in SLASH_COMMANDS]


def test_the_documented_intents_are_the_ones_asked_for() -> None:
    line = SECTION[SECTION.index("The adapter asks") :].split("; without", 1)[0]
    documented = set(re.findall(r"`(\w+)`", line))
    assert documented == {name for name, on in intents() if on}


def test_every_discord_key_is_documented() -> None:
    own = set(DiscordSection.model_fields) - set(AdapterSection.model_fields)
    assert own == {"listen_channels", "thread_channels"}
    start = SECTION.index("\n[adapters.discord]\n")
    example = SECTION[start : SECTION.index("```", start)]
    for key in own:
        assert f"\n{key} = " in example and f"`{key}`" in SECTION, key


def test_the_example_section_is_valid() -> None:
    start = SECTION.index("```toml\n") + len("```toml\n")
    example = tomllib.loads(SECTION[start : SECTION.index("```", start)])
    section = parse_section("discord", example["adapters"]["discord"])
    assert isinstance(section, DiscordSection) and section.access_problems() == []
