"""``coven-codex exec``: run Codex once, reproducibly, in a prepared workspace (docs/exec.md).

``coven-codex exec --workspace W [options] -- CODEX_ARGS...``: everything after ``--`` goes to
Codex unchanged (``-C``/``--cd`` and ``--json`` are refused, ``--json`` is added for ``exec``);
the exit code is Codex's. See :mod:`coven_codex.oneshot.run` for the order and the retry rule.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shlex
import signal
import sys
from pathlib import Path

from coven_codex.codex.discovery import DiscoveryError
from coven_codex.codex.version import VersionError
from coven_codex.oneshot.arguments import ArgumentError, parse_codex_arguments
from coven_codex.oneshot.run import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_OUTPUT_FILE,
    RunOptions,
    dry_run,
    run_oneshot,
)
from coven_codex.oneshot.workspace import HOME_DIR, STDOUT_FILE, TRACES_DIR, TRACES_FILE, WorkspaceError, WorkspaceSpec

HELP = "run Codex once in a prepared workspace (isolated CODEX_HOME, AGENTS.md, traces), passing CODEX_ARGS through"
USAGE_ERROR = 2
INTERRUPTED = 130


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the command's flags to ``parser``."""
    parser.usage = "%(prog)s --workspace W [options] -- CODEX_ARGS..."
    parser.add_argument("--workspace", type=Path, required=True, help="directory Codex works in (created if missing)")
    parser.add_argument(
        "--codex-config",
        dest="codex_config",
        type=Path,
        default=None,
        metavar="BASE.toml",
        help="your base Codex config.toml, copied fresh into W/.codex-home at every run and merged",
    )
    parser.add_argument(
        "--read-only-dir",
        dest="read_only_dirs",
        type=Path,
        action="append",
        default=[],
        metavar="D",
        help="a directory outside W that Codex may read but never write (repeatable)",
    )
    parser.add_argument(
        "--prompt-file", dest="prompt_file", type=Path, default=None, metavar="T", help="AGENTS.md template ($VARNAME)"
    )
    parser.add_argument(
        "-V",
        dest="variables",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a template variable (repeatable; $WORKSPACE_DIR is built in)",
    )
    parser.add_argument(
        "--collect-traces",
        dest="collect_traces",
        action="store_true",
        help=f"capture Codex's OpenTelemetry export into W/{TRACES_DIR}/{TRACES_FILE} and its output into "
        f"W/{TRACES_DIR}/{STDOUT_FILE}",
    )
    parser.add_argument(
        "--otel-port", dest="otel_port", type=int, default=0, metavar="P", help="receiver port (default 0: any free)"
    )
    parser.add_argument(
        "--output-file",
        dest="output_file",
        type=Path,
        default=Path(DEFAULT_OUTPUT_FILE),
        metavar="F",
        help=f"exec mode: the file Codex must write, relative to W (default {DEFAULT_OUTPUT_FILE})",
    )
    parser.add_argument(
        "--max-retries",
        dest="max_retries",
        type=int,
        default=DEFAULT_MAX_RETRIES,
        metavar="N",
        help=f"exec mode: resumes of the same thread while the output file is missing (default {DEFAULT_MAX_RETRIES})",
    )
    parser.add_argument(
        "--dry-run", dest="dry_run", action="store_true", help="print the command and environment changes, run nothing"
    )
    parser.add_argument("--codex-path", dest="codex_path", default=None, help="the Codex executable (path or name)")
    parser.add_argument("-v", "--verbose", action="store_true", help="say what is done, step by step, on stderr")
    parser.add_argument("codex_args", nargs=argparse.REMAINDER, metavar="-- CODEX_ARGS", help="arguments for Codex")


def execute(args: argparse.Namespace) -> int:
    """Run the command; Codex's exit code, or 2 for what the user must fix first."""
    if args.verbose:
        logging.getLogger("coven_codex").setLevel(logging.INFO)
    codex_args = list(args.codex_args)
    if codex_args[:1] == ["--"]:
        codex_args = codex_args[1:]
    try:
        variables = _variables(args.variables)
        if args.max_retries < 0:
            raise ArgumentError(f"--max-retries {args.max_retries} is negative; give 0 or more")
        if not 0 <= args.otel_port <= 65535:
            raise ArgumentError(f"--otel-port {args.otel_port} is not a port; give 0 (any free port) to 65535")
        options = RunOptions(
            spec=WorkspaceSpec(
                workspace=args.workspace,
                base_config=args.codex_config,
                read_only_dirs=tuple(args.read_only_dirs),
                prompt_file=args.prompt_file,
                variables=variables,
            ),
            codex_args=parse_codex_arguments(codex_args),
            codex_path=args.codex_path,
            collect_traces=args.collect_traces,
            otel_port=args.otel_port,
            output_file=args.output_file,
            max_retries=args.max_retries,
        )
        if args.dry_run:
            _print_dry_run(options)
            return 0
        return asyncio.run(_run(options))
    except (ArgumentError, WorkspaceError, DiscoveryError, VersionError) as exc:
        print(f"coven-codex exec: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except OSError as exc:
        print(f"coven-codex exec: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return INTERRUPTED


async def _run(options: RunOptions) -> int:
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    terminated: list[bool] = []

    def on_sigterm() -> None:
        terminated.append(True)
        task.cancel()

    loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    try:
        return await run_oneshot(
            options,
            stdout=sys.stdout.buffer,
            stderr=sys.stderr.buffer,
            notify=lambda text: print(f"coven-codex exec: {text}", file=sys.stderr, flush=True),
        )
    except asyncio.CancelledError:
        if not terminated:
            raise  # Ctrl-C: asyncio.run turns it into KeyboardInterrupt
        return 128 + signal.SIGTERM
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


def _variables(values: list[str]) -> dict[str, str]:
    result: dict[str, str] = {}
    for value in values:
        name, sep, text = value.partition("=")
        if not sep or not name:
            raise ArgumentError(f"-V {value!r} is not KEY=VALUE; write e.g. -V PROJECT=demo")
        result[name] = text
    return result


def _print_dry_run(options: RunOptions) -> None:
    plan = dry_run(options, os.environ)
    spec = plan.plan.spec
    lines = [f"# workspace {spec.root}" + (" (would run git init)" if plan.plan.git_init else "")]
    lines.append(f"# CODEX_HOME {spec.root / HOME_DIR} (config.toml copied from {spec.base_config or 'nothing'})")
    if plan.plan.agents_md is not None:
        lines.append(f"# AGENTS.md from {spec.prompt_file} ({len(plan.plan.agents_md)} characters)")
    for path in plan.plan.read_only_dirs:
        lines.append(f"# read-only {path}")
    if options.collect_traces:
        port = options.otel_port or "<a free port>"
        lines.append(f"# traces: OTLP/HTTP on 127.0.0.1:{port} -> {spec.traces_dir / TRACES_FILE}")
    lines.append(f"cd {shlex.quote(str(plan.cwd))}")
    for key, value in plan.set_env.items():
        lines.append(f"export {key}={shlex.quote(value)}")
    for key in plan.unset_env:
        lines.append(f"unset {key}")
    lines.append(shlex.join(plan.argv))
    print("\n".join(lines))
