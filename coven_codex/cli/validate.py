"""``coven-codex validate``: the preflight."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from coven_codex.cli.options import JOURNAL_METAVAR, add_spells_option, journal_argument
from coven_codex.settings import SettingsError, load_settings, read_settings_file
from coven_codex.validate.adapter_probes import adapter_plan
from coven_codex.validate.framework import ProbeContext, exit_code, run_plan
from coven_codex.validate.plan import PLAN
from coven_codex.validate.report import render_json, render_table

HELP = "check the whole environment (Codex, credentials, folders, spells, shim, config) and say what to fix"


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``validate`` command's options to ``parser``."""
    parser.add_argument("--workspace", type=Path, help="the directory Codex will work in (default: .)")
    parser.add_argument("--config", type=Path, help="coven.toml with the daemon's settings")
    parser.add_argument(
        "--journal", type=journal_argument, metavar=JOURNAL_METAVAR, help="the chat journal the daemon will follow"
    )
    parser.add_argument("--codex-path", dest="codex_path", help="Codex executable: absolute path or bare name")
    parser.add_argument("--codex-config", dest="codex_config", type=Path, help="your base Codex config.toml")
    parser.add_argument("--driver", choices=["auto", "app-server", "exec"], help="force a driver")
    add_spells_option(parser, "spell sources to check, MODULE:OBJECT (repeatable)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")


def execute(args: argparse.Namespace) -> int:
    """Run the preflight checks and print them as a table or JSON; returns the exit code the outcomes call for."""
    overrides: dict[str, Any] = {
        "workspace": args.workspace,
        "journal": args.journal,
        "codex_path": args.codex_path,
        "codex_config": args.codex_config,
        "driver": args.driver,
        "spells": args.spells,
    }
    try:
        raw = read_settings_file(args.config) if args.config else {}
        settings = load_settings(args.config, overrides)
    except SettingsError as exc:
        if args.json:  # --json always prints JSON, even when the settings cannot be read
            print(json.dumps({"ok": False, "error": str(exc), "checks": []}, indent=2, ensure_ascii=False))
        else:
            print(f"coven-codex validate: {exc}", file=sys.stderr)
        return 2
    raw.update({key: value for key, value in overrides.items() if value is not None})
    outcomes = asyncio.run(run_plan(PLAN + adapter_plan(settings), ProbeContext(settings=settings, raw_settings=raw)))
    print(render_json(outcomes) if args.json else render_table(outcomes))
    return exit_code(outcomes)
