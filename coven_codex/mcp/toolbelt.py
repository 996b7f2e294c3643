"""The toolbelt file: the registered spells as Codex sees them, written for people to inspect."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from coven_codex import __version__
from coven_codex.mcp.codex_entry import SERVER_NAME
from coven_codex.mcp.registry import SpellRegistry

TOOLBELT_FILENAME = "toolbelt.json"


def toolbelt(registry: SpellRegistry, server_name: str = SERVER_NAME) -> dict[str, Any]:
    """The toolbelt document: the server name, the generator and every spell's tool definition."""
    return {
        "server": server_name,
        "generator": f"coven-codex {__version__}",
        "tools": registry.tool_definitions(),
    }


def write_toolbelt(registry: SpellRegistry, path: Path, server_name: str = SERVER_NAME) -> Path:
    """Write the toolbelt JSON to ``path`` atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(toolbelt(registry, server_name), indent=2, ensure_ascii=False) + "\n"
    fd, temporary = tempfile.mkstemp(prefix=".toolbelt-", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    return path
