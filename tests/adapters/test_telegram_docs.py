"""docs/adapters.md's Telegram section says what the code does: its keys, its example, its commands."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from coven_codex.adapters.kit.config import AdapterSection, TelegramSection, parse_section
from coven_codex.adapters.telegram.platform import COMMANDS

DOC = (Path(__file__).resolve().parents[2] / "docs" / "adapters.md").read_text(encoding="utf-8")
SECTION = DOC[DOC.index("## Telegram (`coven-codex telegram`)") : DOC.index("## What each adapter supports")]


def _example() -> str:
    start = SECTION.index("```toml\n") + len("```toml\n")
    return SECTION[start : SECTION.index("```", start)]


def test_every_telegram_key_is_in_the_example_and_the_example_is_valid() -> None:
    own = set(TelegramSection.model_fields) - set(AdapterSection.model_fields) | {"edit_interval"}
    example = _example()
    for key in own:
        assert f"\n{key} = " in example or f"\n# {key} = " in example, key
    section = parse_section("telegram", tomllib.loads(example)["adapters"]["telegram"])
    assert isinstance(section, TelegramSection) and section.access_problems() == []
    defaults = TelegramSection(allow_users=["1"])
    for key in ("message_limit", "edit_interval", "chat_per_minute", "group_per_minute", "global_per_second"):
        assert getattr(section, key) == getattr(defaults, key), key  # the example shows the defaults


def test_the_registered_commands_are_the_kits() -> None:
    from coven_codex.adapters.kit.commands import COMMANDS as KIT

    assert tuple(name.replace("_", "-") for name, _ in COMMANDS) == KIT
    assert all(re.fullmatch(r"[a-z0-9_]{1,32}", name) for name, _ in COMMANDS)  # what setMyCommands takes
