"""``coven-codex spells``: list the spells Codex will see as tools (or print them as JSON)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from coven_codex.cli.options import add_spells_option
from coven_codex.mcp.codex_entry import SERVER_NAME
from coven_codex.mcp.loader import SpellLoadError, load_configured_spells
from coven_codex.mcp.registry import SpellRegistry
from coven_codex.mcp.toolbelt import TOOLBELT_FILENAME, toolbelt, write_toolbelt
from coven_codex.settings import SettingsError, load_settings

HELP = "list the spells (Python functions) Codex will see as tools"


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``spells`` command's options to ``parser``."""
    add_spells_option(parser)
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="COVEN_TOML",
        help="coven.toml to read the `spells` list (and workspace) from",
    )
    parser.add_argument(
        "--workspace", type=Path, default=None, help="workspace directory (modules inside it are never imported)"
    )
    parser.add_argument("--json", action="store_true", help="print the toolbelt JSON instead of a table")
    parser.add_argument(
        "--write-toolbelt",
        action="store_true",
        help=f"also write <state dir>/{TOOLBELT_FILENAME} (state dir: see `run --help`)",
    )


def execute(args: argparse.Namespace) -> int:
    """Print the configured spells as a table or toolbelt JSON (and write the toolbelt file if asked)."""
    try:
        settings = load_settings(args.config, {"spells": args.spells, "workspace": args.workspace})
    except SettingsError as exc:
        print(f"coven-codex spells: {exc}", file=sys.stderr)
        return 2
    if not settings.spells:
        print(
            "coven-codex spells: no spells configured; pass --spells module:object or set "
            '`spells = ["module:object"]` in coven.toml',
            file=sys.stderr,
        )
        return 2
    try:
        registry = load_configured_spells(settings.spells, workspace=settings.workspace)
    except SpellLoadError as exc:
        print(f"coven-codex spells: {exc}", file=sys.stderr)
        return 2
    if args.write_toolbelt:
        path = write_toolbelt(registry, settings.resolved_state_dir / TOOLBELT_FILENAME)
        print(f"wrote {path}", file=sys.stderr)
    if args.json:
        print(json.dumps(toolbelt(registry), indent=2, ensure_ascii=False))
    else:
        print(render_table(registry))
    return 0


def render_table(registry: SpellRegistry) -> str:
    """Each spell's signature, return type, timeout, sync or async, and its description's first line."""
    lines = [
        f"{len(registry)} spell(s), served as MCP server {SERVER_NAME!r} "
        f"(the model sees mcp__{SERVER_NAME}__<name>; Codex 0.47: {SERVER_NAME}__<name>)",
        "",
    ]
    for spell in registry:
        lines.append(
            f"{spell.name}({_parameters(spell.arguments.schema)}) -> {_returns(spell.tool_definition())}"
            f"   [timeout {spell.timeout:g}s, {'async' if spell.is_async else 'sync'}]"
        )
        summary = spell.description.strip().splitlines()[0] if spell.description.strip() else "(no docstring)"
        lines.append(f"    {summary}")
    return "\n".join(lines)


def _parameters(schema: dict[str, Any]) -> str:
    required = set(schema.get("required", []))
    parts = []
    for name, prop in schema.get("properties", {}).items():
        kind = _type_name(prop)
        parts.append(f"{name}: {kind}" if name in required else f"{name}: {kind} = {json.dumps(prop.get('default'))}")
    return ", ".join(parts)


def _returns(definition: dict[str, Any]) -> str:
    return "structured" if "outputSchema" in definition else "text"


def _type_name(prop: dict[str, Any]) -> str:
    if "type" in prop:
        kind = prop["type"]
        if kind == "array" and isinstance(prop.get("items"), dict):
            return f"list[{_type_name(prop['items'])}]"
        return str(kind)
    for key in ("anyOf", "oneOf"):
        if key in prop:
            return " | ".join(_type_name(option) for option in prop[key])
    return "any"
