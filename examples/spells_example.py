"""Example spells: load them with ``coven-codex run --spells examples.spells_example:spells``
(or ``spells = ["examples.spells_example:spells"]`` in coven.toml), and list them with
``coven-codex spells --spells examples.spells_example:spells``.

Each function becomes an MCP tool: its name is the tool name, its docstring the description,
its type hints the input schema (validated before the call), a structured return type the
output schema.
"""

from __future__ import annotations

import asyncio
import statistics
from typing import Annotated

from pydantic import BaseModel, Field

from coven_codex.mcp import SpellContext, SpellError, SpellRegistry

registry = SpellRegistry(default_timeout=30.0)


@registry.spell
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class Summary(BaseModel):
    count: int
    mean: float
    median: float


@registry.spell
def summarize(numbers: Annotated[list[float], Field(min_length=1, description="values to summarise")]) -> Summary:
    """Count, mean and median of a list of numbers."""
    return Summary(count=len(numbers), mean=statistics.fmean(numbers), median=statistics.median(numbers))


@registry.spell(timeout=60.0)
async def countdown(seconds: Annotated[int, Field(ge=1, le=30)], ctx: SpellContext) -> str:
    """Wait the given number of seconds, reporting progress each second."""
    for done in range(1, seconds + 1):
        await asyncio.sleep(1)
        ctx.report_progress(done, seconds, f"{done}/{seconds}s")
    return f"waited {seconds}s"


@registry.spell
def divide(a: float, b: float) -> float:
    """Divide a by b."""
    if b == 0:
        raise SpellError("cannot divide by zero; pass a non-zero b")
    return a / b


spells = registry
