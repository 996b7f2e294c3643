"""Fixtures for the spell (MCP) tests: the sample registry and a running SpellServer."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from coven_codex.mcp import SpellRegistry, SpellServer

sys.path.insert(0, str(Path(__file__).parent))

from mcp_sample_spells import registry as sample_registry


@pytest.fixture
def registry() -> SpellRegistry:
    return sample_registry


@pytest.fixture
async def server(registry: SpellRegistry) -> AsyncIterator[SpellServer]:
    async with SpellServer(registry, label="test") as running:
        yield running
