"""``coven-codex run``: the daemon (docs/configuration.md).

Flags win over ``coven.toml`` (``--config``), which wins over the defaults. Before anything
starts, the folder checks of ``validate`` run (:func:`~coven_codex.validate.plan.run_refusals`):
what ``validate`` refuses, ``run`` refuses with the same words (exit 2). Runs until SIGINT or
SIGTERM, then stops intake, lets running turns stop (``--kill-grace``), ends every Codex
process tree, saves cursors and exits 0; a signal during start-up stops it as soon as what it
started can be ended, also 0 (:mod:`coven_codex.cli.stopping`). A second signal during shutdown
exits at once (1).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import Any

from coven_codex.cli.options import JOURNAL_METAVAR, add_spells_option, journal_argument
from coven_codex.cli.stopping import STOP
from coven_codex.daemon.bootstrap import BootstrapError, run_daemon
from coven_codex.settings import Settings, SettingsError, load_settings
from coven_codex.validate.plan import run_refusals

log = logging.getLogger(__name__)

HELP = "run the daemon: bridge a chat journal and Codex until SIGINT/SIGTERM"

_FLAGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("--workspace", {"type": Path, "help": "directory Codex works in (default: the current one)"}),
    (
        "--journal",
        {
            "type": journal_argument,
            "metavar": JOURNAL_METAVAR,
            "help": "the chat journal: a JSONL file (created if missing) or a Redis stream",
        },
    ),
    (
        "--codex-config",
        {
            "type": Path,
            "dest": "codex_config",
            "help": "your base Codex config.toml, copied into the isolated CODEX_HOME",
        },
    ),
    ("--codex-path", {"dest": "codex_path", "help": "the Codex executable (a path, or a name on PATH)"}),
    (
        "--codex-home",
        {"type": Path, "dest": "codex_home", "help": "isolated CODEX_HOME (default STATE_DIR/codex-home)"},
    ),
    (
        "--state-dir",
        {
            "type": Path,
            "dest": "state_dir",
            "help": "session state, process record, lock (default ~/.local/state/coven-codex/<workspace name>-<hash>)",
        },
    ),
    ("--driver", {"choices": ["auto", "app-server", "exec"], "help": "how thoughts reach Codex"}),
    (
        "--max-sessions",
        {"type": int, "dest": "max_sessions", "help": "conversations with a Codex turn running at once, at most"},
    ),
    (
        "--max-jobs",
        {"type": int, "dest": "max_jobs", "help": "jobs (conversations job:<id>) with a Codex turn running at once"},
    ),
    (
        "--workspace-root",
        {
            "type": Path,
            "action": "append",
            "dest": "workspace_roots",
            "help": "a directory inside which a conversation may name its own cwd (repeatable)",
        },
    ),
    (
        "--allow-model",
        {
            "action": "append",
            "dest": "models",
            "metavar": "NAME",
            "help": "a model a chat may choose with /model (repeatable; none: the chat cannot choose)",
        },
    ),
    (
        "--allow-mode",
        {
            "action": "append",
            "dest": "modes",
            "choices": ("read-only", "ask", "auto"),
            "help": "a mode a chat may choose with /mode (repeatable; none: the chat cannot choose)",
        },
    ),
    (
        "--app-servers",
        {"type": int, "dest": "app_servers", "help": "shared `codex app-server` processes (app-server driver)"},
    ),
    (
        "--release-thread-after",
        {
            "type": float,
            "dest": "release_thread_after",
            "help": "seconds after its turn an idle conversation lets its Codex thread go",
        },
    ),
    (
        "--idle-reap",
        {"type": float, "dest": "idle_reap", "help": "seconds a shared Codex with no thread is kept before it ends"},
    ),
    ("--turn-timeout", {"type": float, "dest": "turn_timeout", "help": "seconds a turn may run, 30-3600"}),
    (
        "--stream-idle-timeout",
        {
            "type": float,
            "dest": "stream_idle_timeout",
            "help": "seconds without model output before a turn is abandoned",
        },
    ),
    ("--kill-grace", {"type": float, "dest": "kill_grace", "help": "seconds between TERM and KILL"}),
    (
        "--mid-turn",
        {
            "choices": ["queue", "steer"],
            "dest": "mid_turn",
            "help": "a thought arriving during a turn waits (queue) or joins it (steer)",
        },
    ),
    (
        "--approval-policy",
        {
            "choices": ["ask", "approve", "deny"],
            "dest": "approval_policy",
            "help": "answer Codex's approval requests by asking the chat, or always",
        },
    ),
    ("--durability", {"choices": ["always", "batched", "never"], "help": "journal and state fsync policy"}),
    (
        "--journal-segment-bytes",
        {"type": int, "dest": "journal_segment_bytes", "help": "roll the journal over to a new segment at this size"},
    ),
    (
        "--journal-segment-age",
        {
            "type": float,
            "dest": "journal_segment_age",
            "help": "roll the journal over to a new segment at this age (s)",
        },
    ),
    (
        "--journal-retention",
        {
            "choices": ["keep", "archive", "delete"],
            "dest": "journal_retention",
            "help": "what becomes of journal segments every cursor has passed",
        },
    ),
    ("--journal-archive", {"type": Path, "dest": "journal_archive", "help": "where archived journal segments go"}),
    (
        "--cluster",
        {
            "action": argparse.BooleanOptionalAction,
            "dest": "cluster",
            "help": "share a Redis journal with other daemons (leases, fencing, mirrored state)",
        },
    ),
    (
        "--lease-time",
        {
            "type": float,
            "dest": "lease_time",
            "help": "seconds a conversation's lease lasts without renewal, with several daemons on one Redis journal",
        },
    ),
    (
        "--restart-backoff",
        {
            "type": float,
            "dest": "restart_backoff",
            "help": "first delay before a dead Codex is restarted (doubles, max 60 s)",
        },
    ),
    (
        "--max-attachment-bytes",
        {
            "type": int,
            "dest": "max_attachment_bytes",
            "help": "largest image a thought may attach, in bytes",
        },
    ),
    (
        "--max-file-bytes",
        {
            "type": int,
            "dest": "max_file_bytes",
            "help": "largest file Codex may send to the chat (send_file, or an image it generates), in bytes",
        },
    ),
    (
        "--send-file",
        {
            "choices": ("auto", "on", "off"),
            "dest": "send_file",
            "help": "serve the built-in spell send_file: on, off, or auto (beside spells of your own; the default)",
        },
    ),
    (
        "--approval-timeout",
        {
            "type": float,
            "dest": "approval_timeout",
            "help": "seconds to wait for the chat's approval answer before denying",
        },
    ),
    (
        "--stream-deltas",
        {"action": argparse.BooleanOptionalAction, "dest": "stream_deltas", "help": "write streaming `delta` entries"},
    ),
    (
        "--collect-traces",
        {
            "action": argparse.BooleanOptionalAction,
            "dest": "collect_traces",
            "help": "capture Codex's OpenTelemetry export as JSONL under STATE_DIR/traces/",
        },
    ),
    (
        "--metrics-port",
        {
            "type": int,
            "dest": "metrics_port",
            "help": "serve Prometheus /metrics, /healthz and /readyz on this port (0: any free port); off by default",
        },
    ),
    ("--metrics-host", {"dest": "metrics_host", "help": "the address the metrics port listens on"}),
    (
        "--metrics-allow",
        {
            "action": "append",
            "dest": "metrics_allow",
            "metavar": "CIDR",
            "help": "a network besides loopback whose clients may use the metrics port (repeatable)",
        },
    ),
    (
        "--agents-template",
        {"type": Path, "dest": "agents_template", "help": "template for AGENTS.md with $VARNAME substitution"},
    ),
)
TABLE_SETTINGS = frozenset({"codex", "agents_vars", "adapters", "webhooks", "projects"})
"""Settings that are TOML tables: ``coven.toml`` only, no flag."""


def default_text(name: str) -> str:
    """`` (default X)`` for a setting with a plain default, else an empty string."""
    field = Settings.model_fields[name]
    if field.default_factory is not None or field.default is None:
        return ""
    value = field.default
    shown = (
        ("on" if value else "off")
        if isinstance(value, bool)
        else f"{value:g}"
        if isinstance(value, float)
        else str(value)
    )
    return f" (default {shown})"


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``run`` command's options (``--config``, one flag per setting, ``--spells``) to ``parser``."""
    parser.add_argument("--config", type=Path, help="coven.toml with the same settings as the flags")
    for flag, options in _FLAGS:
        name = options.get("dest", flag.removeprefix("--"))
        text = str(options["help"])
        if name in Settings.model_fields and "default" not in text:
            text += default_text(name)
        parser.add_argument(flag, default=None, **{**options, "help": text})
    add_spells_option(parser, "Python functions Codex may call as tools, MODULE:OBJECT (repeatable)")


def settings_from_args(args: argparse.Namespace) -> Settings:
    """The settings from ``--config`` with the given flags on top; raises :class:`SettingsError`."""
    overrides = {name: getattr(args, name, None) for name in Settings.model_fields if hasattr(args, name)}
    return load_settings(args.config, overrides)


def execute(args: argparse.Namespace) -> int:
    """Run the daemon (``coven-codex run``); exit code 2 for bad settings or a refusal, 1 if start-up
    fails, 0 once stopped by SIGINT/SIGTERM, whenever it came (:mod:`coven_codex.cli.stopping`)."""
    STOP.install()  # (main installed it already when it runs `run`; a direct caller gets it here)
    try:
        settings = settings_from_args(args)
    except SettingsError as exc:
        print(f"coven-codex run: {exc}", file=sys.stderr)
        return 2
    refused = asyncio.run(run_refusals(settings))
    for outcome in refused:
        print(f"coven-codex run: {outcome.result.detail}\n  fix: {outcome.result.fix}", file=sys.stderr)
    if refused:
        return 2
    if STOP.requested:
        log.info("%s received during start-up: not starting", STOP.describe())
        return 0
    try:
        return asyncio.run(_main(settings))
    except BootstrapError as exc:
        print(f"coven-codex run: {exc}", file=sys.stderr)
        return 1


async def _main(settings: Settings) -> int:
    stop = asyncio.Event()
    STOP.bind(stop, asyncio.get_running_loop())
    try:
        await run_daemon(settings, stop, ready=lambda: log.info("ready (pid %d)", os.getpid()))
    finally:
        STOP.unbind()
    return 0
