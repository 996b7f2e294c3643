"""Valid MCP tool names (MCP 2025-11-25, "Tool names"): 1-128 of ``[A-Za-z0-9_.-]``."""

from __future__ import annotations

import re

TOOL_NAME_PATTERN = re.compile(r"[A-Za-z0-9_.\-]{1,128}")


class SpellDefinitionError(ValueError):
    """A spell cannot be registered as written; the message says what to change."""


def check_tool_name(name: str) -> str:
    """Return ``name`` if it is a valid MCP tool name, else raise :class:`SpellDefinitionError`."""
    if not isinstance(name, str) or TOOL_NAME_PATTERN.fullmatch(name) is None:
        raise SpellDefinitionError(
            f"spell name {name!r} is not a valid MCP tool name: use 1-128 characters from "
            "A-Z, a-z, 0-9, '_', '-' and '.' (pass name=... to choose another)"
        )
    return name
