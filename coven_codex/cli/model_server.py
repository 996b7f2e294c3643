"""``coven-codex model-server``: the scripted model server as a command, for running offline.

It serves the OpenAI Responses API on 127.0.0.1 (:class:`~coven_codex.testing.ScriptedModelServer`)
until SIGINT/SIGTERM. Its first stdout line is the base URL; then it prints the base Codex
config that points Codex at it (and writes it to ``--write-config FILE``), to pass to
``coven-codex run --codex-config FILE``. The config's provider names an ``env_key`` variable
Codex insists on being set (to anything), so the snippet says which one to export.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path
from typing import TextIO

import tomlkit

from coven_codex.testing.codex_config import DEFAULT_ENV_KEY, codex_config
from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.responders import NAMED_RESPONDERS

HELP = "a scripted local model server, so the real daemon and Codex run offline without an account"
STREAM_IDLE_TIMEOUT_MS = 60_000


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the command's flags to ``parser``."""
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (default 0: any free port)")
    parser.add_argument(
        "--script",
        choices=sorted(NAMED_RESPONDERS),
        default="echo",
        help="how to answer: 'echo' repeats the prompt; 'commands' also understands /tool, "
        "/error, /fail, /stall, /think prompts (default echo)",
    )
    parser.add_argument(
        "--write-config",
        dest="write_config",
        type=Path,
        default=None,
        metavar="FILE",
        help="also write the base Codex config to FILE (for run --codex-config FILE)",
    )
    parser.add_argument(
        "--record",
        type=Path,
        default=None,
        metavar="FILE",
        help="append every request received to this JSONL file (authorization redacted)",
    )


def base_config_text(base_url: str) -> str:
    """The base Codex config (TOML) that points Codex at the server at ``base_url``."""
    header = (
        f"# Codex against the scripted model server at {base_url}.\n"
        f"# Codex needs ${DEFAULT_ENV_KEY} set (to anything): export {DEFAULT_ENV_KEY}=offline\n"
    )
    return header + tomlkit.dumps(codex_config(base_url, stream_idle_timeout_ms=STREAM_IDLE_TIMEOUT_MS))


def execute(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; 0 then, 2 when the port or the config file cannot be used."""
    try:
        return asyncio.run(_serve(args, sys.stdout))
    except OSError as exc:
        print(
            f"coven-codex model-server: {exc.strerror or exc} ({exc.filename or f'port {args.port}'}); "
            "choose another --port or --write-config",
            file=sys.stderr,
        )
        return 2


async def _serve(args: argparse.Namespace, out: TextIO) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    for signum in signals:  # before anything is printed: whoever reads the URL may stop us at once
        loop.add_signal_handler(signum, stop.set)
    try:
        async with ScriptedModelServer(
            responder=NAMED_RESPONDERS[args.script], host=args.host, port=args.port, record_file=args.record
        ) as server:
            text = base_config_text(server.base_url)
            if args.write_config is not None:
                await asyncio.to_thread(args.write_config.expanduser().write_text, text, encoding="utf-8")
            out.write(f"{server.base_url}\n\n")
            if args.write_config is not None:
                out.write(f"# written to {args.write_config}\n")
            out.write(text)
            out.flush()
            await stop.wait()
    finally:
        for signum in signals:
            loop.remove_signal_handler(signum)
    return 0
