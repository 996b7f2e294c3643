"""Spells: Python functions exposed to Codex as MCP tools.

- :class:`SpellRegistry` (``@registry.spell``, ``registry.register``) and the :func:`spell` marker;
- :func:`load_spells` / :func:`load_spell_sources` for ``module:object`` sources;
- :class:`SpellServer`: the MCP server on a private Unix socket (one per Codex session);
- :func:`codex_mcp_entry`: the ``[mcp_servers.coven]`` table that makes Codex launch the shim;
- :func:`write_toolbelt`: the registered tools as JSON, for inspection.
"""

from coven_codex.mcp.codex_entry import SERVER_NAME, codex_mcp_entry
from coven_codex.mcp.connection import ConnectionLimits
from coven_codex.mcp.context import SpellContext
from coven_codex.mcp.invoke import SpellError
from coven_codex.mcp.loader import SpellLoadError, load_configured_spells, load_spell_sources, load_spells
from coven_codex.mcp.names import SpellDefinitionError
from coven_codex.mcp.registry import Spell, SpellRegistry, spell
from coven_codex.mcp.server import SpellServer, SpellServerError
from coven_codex.mcp.toolbelt import TOOLBELT_FILENAME, toolbelt, write_toolbelt

__all__ = [
    "SERVER_NAME",
    "TOOLBELT_FILENAME",
    "ConnectionLimits",
    "Spell",
    "SpellContext",
    "SpellDefinitionError",
    "SpellError",
    "SpellLoadError",
    "SpellRegistry",
    "SpellServer",
    "SpellServerError",
    "codex_mcp_entry",
    "load_configured_spells",
    "load_spell_sources",
    "load_spells",
    "spell",
    "toolbelt",
    "write_toolbelt",
]
