"""The demo's spells: ordinary Python functions that Codex calls as MCP tools."""

from __future__ import annotations

import random
from typing import Annotated

from pydantic import Field

from coven_codex.mcp import SpellRegistry

spells = SpellRegistry(default_timeout=10.0)


@spells.spell
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@spells.spell
def roll_dice(
    sides: Annotated[int, Field(ge=2, le=1000, description="faces of the die")] = 6,
    count: Annotated[int, Field(ge=1, le=20)] = 1,
) -> list[int]:
    """Roll `count` dice with `sides` faces each."""
    return [random.randint(1, sides) for _ in range(count)]


@spells.spell
def word_count(text: str) -> int:
    """Count the words in a text."""
    return len(text.split())
