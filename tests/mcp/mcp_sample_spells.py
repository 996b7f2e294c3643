"""Spells the MCP tests call (sync, async, structured, failing, slow, progress)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from coven_codex.mcp import SpellContext, SpellError, SpellRegistry, spell

registry = SpellRegistry(default_timeout=20.0)


@registry.spell
def add(a: int, b: int = 2) -> int:
    """Add two integers."""
    return a + b


@registry.spell
async def shout(text: Annotated[str, Field(min_length=1, description="what to shout")]) -> str:
    """Upper-case the text, asynchronously."""
    await asyncio.sleep(0)
    return text.upper() + "!"


class Point(BaseModel):
    x: float
    y: float


class Stats(BaseModel):
    count: int
    total: float
    points: list[Point]


@registry.spell
def stats(points: list[Point]) -> Stats:
    """Count and sum points."""
    return Stats(count=len(points), total=sum(p.x + p.y for p in points), points=points)


class Pair(TypedDict):
    left: str
    right: str


@registry.spell
def split(text: str, sep: str = ",") -> Pair:
    """Split text once."""
    left, _, right = text.partition(sep)
    return {"left": left, "right": right}


@dataclass
class Box:
    width: int
    height: int


@registry.spell
def box_area(box: Box) -> int:
    """Area of a box."""
    return box.width * box.height


@registry.spell
def explode(message: str) -> str:
    """Always fails."""
    raise RuntimeError(f"kaboom: {message}")


@registry.spell
def refuse(reason: str) -> str:
    """Fails with a user-facing message."""
    raise SpellError(reason)


@registry.spell(timeout=0.5)
async def too_slow() -> str:
    """Sleeps past its timeout."""
    await asyncio.sleep(30)
    return "never"


@registry.spell(timeout=0.5)
def too_slow_sync(ctx: SpellContext) -> str:
    """Sleeps (in a thread) past its timeout, checking for cancellation."""
    for _ in range(300):
        if ctx.cancelled:
            return "stopped"
        time.sleep(0.01)
    return "never"


@registry.spell
async def sleep(seconds: float) -> str:
    """Sleep, then say how long."""
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@registry.spell
async def progress(steps: int, ctx: SpellContext) -> str:
    """Report progress ``steps`` times."""
    for step in range(1, steps + 1):
        ctx.report_progress(step, steps, f"step {step}")
        await asyncio.sleep(0.01)
    return "done"


@registry.spell
def progress_sync(steps: int, ctx: SpellContext) -> str:
    """Report progress from a worker thread."""
    for step in range(1, steps + 1):
        ctx.report_progress(step, steps)
        time.sleep(0.01)
    return "done"


@registry.spell
def echo_size(blob: str) -> int:
    """Length of a (large) string."""
    return len(blob)


@registry.spell
def make_blob(size: int) -> str:
    """A string of ``size`` x's."""
    return "x" * size


class Ratio(BaseModel):
    value: float


@registry.spell
def ratio(a: float, b: float) -> Ratio:
    """a / b, infinite for b == 0 (which JSON cannot carry)."""
    return Ratio(value=a / b if b else float("inf"))


@registry.spell
def nothing() -> None:
    """Returns nothing."""


@spell(name="marked.tool", timeout=3)
def marked(value: int) -> int:
    """A function marked with the module-level spell decorator."""
    return value * 10


loose_functions = [marked]


lingered: list[str] = []


@registry.spell
async def linger(tag: str, seconds: float = 30) -> str:
    """Sleep; record ``tag`` in ``lingered`` when cancelled."""
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        lingered.append(tag)
        raise
    return f"lingered {seconds}"
