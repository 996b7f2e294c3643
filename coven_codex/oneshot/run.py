"""One run of ``coven-codex exec``: prepare the workspace, run Codex, retry for the output file.

The order (docs/exec.md): with trace capture the OTLP receiver starts first (its port goes into
the isolated config's ``[otel]`` section) and ``W/traces/traces.jsonl`` and ``W/traces/stdout.log``
are started afresh; then the workspace is prepared, then Codex runs in ``W`` with the isolated
``CODEX_HOME``. In ``exec`` mode Codex's stdout and stderr are passed through (and copied to
``stdout.log`` when capturing), and the thread id is read from its ``thread.started`` event.

**Output-file retry**: in ``exec`` mode, while the output file is missing after Codex exits and
fewer than ``max_retries`` resumes were made, the same thread is resumed
(``exec --json resume <thread> <message>``; ``--last`` if no thread id was seen) with
:data:`RETRY_MESSAGE`. The command's exit code is Codex's last one (128 + N for a signal N).

Codex runs in its own process group and is ended as a tree (:func:`~coven_codex.codex.process.terminate_tree`)
when it exits, and when the run is cancelled (Ctrl-C, SIGTERM).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal

from pydantic import BaseModel, ValidationError

from coven_codex.codex.discovery import find_codex
from coven_codex.codex.launch import CodexLaunch, resolve_launch
from coven_codex.codex.process import PIPE_WAIT, ChildProcess, spawn, terminate_tree
from coven_codex.codex.version import detect_version
from coven_codex.oneshot.arguments import CodexArguments
from coven_codex.oneshot.workspace import (
    STDOUT_FILE,
    TRACES_FILE,
    WorkspacePlan,
    WorkspaceSpec,
    plan_workspace,
    prepare_workspace,
)
from coven_codex.traces.otel_config import export_notice
from coven_codex.traces.receiver import OtlpReceiver
from coven_codex.traces.writer import JsonlWriter, open_private

log = logging.getLogger(__name__)

DEFAULT_OUTPUT_FILE = "agent_output.json"
DEFAULT_MAX_RETRIES = 5
KILL_GRACE = 5.0
RETRY_MESSAGE = (
    "The file {path} does not exist yet. Write your final output to {path} (relative to the "
    "workspace) now; the run is not finished until that file exists."
)


@dataclass(frozen=True, slots=True)
class RunOptions:
    """Everything ``coven-codex exec`` was asked to do."""

    spec: WorkspaceSpec
    codex_args: CodexArguments
    codex_path: str | None = None
    collect_traces: bool = False
    otel_port: int = 0
    output_file: Path = Path(DEFAULT_OUTPUT_FILE)
    max_retries: int = DEFAULT_MAX_RETRIES
    kill_grace: float = KILL_GRACE

    @property
    def output_path(self) -> Path:
        """The output file, relative paths taken in the workspace."""
        return self.output_file if self.output_file.is_absolute() else self.spec.root / self.output_file


@dataclass(frozen=True, slots=True)
class DryRun:
    """What a run would do: the exact command, where, and the environment changes."""

    plan: WorkspacePlan
    argv: tuple[str, ...]
    cwd: Path
    set_env: dict[str, str]
    unset_env: tuple[str, ...]


class ThreadStarted(BaseModel):
    """Codex's first ``exec --json`` event: the thread (session) id to resume."""

    type: Literal["thread.started"]
    thread_id: str


@dataclass(slots=True)
class _Attempt:
    code: int
    thread_id: str | None = None


@dataclass(slots=True)
class _Sinks:
    stdout: BinaryIO
    stderr: BinaryIO
    log_file: BinaryIO | None = None


def locate_codex(options: RunOptions, environ: Mapping[str, str]) -> CodexLaunch:
    """Find Codex (as the daemon does) and how to start it; raises ``DiscoveryError``."""
    found = find_codex(options.codex_path, options.spec.root, env=environ)
    return resolve_launch(found, environ)


def dry_run(options: RunOptions, environ: Mapping[str, str]) -> DryRun:
    """Check everything and compute the command and environment, writing nothing."""
    plan = plan_workspace(options.spec)
    launch = locate_codex(options, environ)
    env = launch.environment({**environ, "CODEX_HOME": str(options.spec.codex_home)})
    changed = {key: value for key, value in env.items() if environ.get(key) != value}
    removed = tuple(sorted(key for key in environ if key not in env))
    argv = tuple(launch.argv(*options.codex_args.command()))
    return DryRun(plan, argv, options.spec.root, dict(sorted(changed.items())), removed)


async def run_oneshot(
    options: RunOptions,
    *,
    stdout: BinaryIO,
    stderr: BinaryIO,
    environ: Mapping[str, str] | None = None,
    notify: Callable[[str], None] | None = None,
) -> int:
    """Do the run (see the module docstring); Codex's last exit code. ``notify`` gets the messages
    for the user (traces a version cannot export, the output file still missing)."""
    env = dict(os.environ if environ is None else environ)
    say = notify or (lambda text: log.warning("%s", text))
    plan = await asyncio.to_thread(plan_workspace, options.spec)
    launch = await asyncio.to_thread(locate_codex, options, env)
    async with contextlib.AsyncExitStack() as stack:
        sinks = _Sinks(stdout, stderr)
        receiver: OtlpReceiver | None = None
        if options.collect_traces:
            version = await asyncio.to_thread(detect_version, launch.program, env=env, command=launch.command)
            notice = export_notice(version)
            if notice:
                say(notice)
            traces = options.spec.traces_dir
            open_private(traces / TRACES_FILE, truncate=True).close()  # afresh, there even if nothing is exported
            receiver = await stack.enter_async_context(
                OtlpReceiver(JsonlWriter(traces / TRACES_FILE), port=options.otel_port)
            )
            (traces / STDOUT_FILE).unlink(missing_ok=True)
            if options.codex_args.exec_mode:  # elsewhere Codex keeps the terminal
                sinks.log_file = stack.enter_context(open_private(traces / STDOUT_FILE, truncate=True))
        home = await asyncio.to_thread(prepare_workspace, plan, otel=receiver.target if receiver else None, environ=env)
        for name in home.missing_env_keys:
            say(f"the model provider in the Codex config reads its key from ${name}, which is not set; export it")
        child_env = launch.environment(home.env)
        arguments = options.codex_args
        attempt = await _run_codex(launch.argv(*arguments.command()), child_env, options, sinks, first=True)
        if not arguments.exec_mode:
            return attempt.code
        thread_id = attempt.thread_id
        output = options.output_path
        retries = 0
        while not output.exists() and retries < options.max_retries:
            retries += 1
            log.info(
                "%s is missing after Codex exited with %d; resuming %s (retry %d of %d)",
                output,
                attempt.code,
                f"thread {thread_id}" if thread_id else "the last thread",
                retries,
                options.max_retries,
            )
            message = RETRY_MESSAGE.format(path=options.output_file)
            attempt = await _run_codex(launch.argv(*arguments.resume(thread_id, message)), child_env, options, sinks)
            thread_id = attempt.thread_id or thread_id
        if not output.exists():
            say(
                f"{output} is still missing after Codex exited with {attempt.code} and {retries} resume(s) "
                f"(--max-retries {options.max_retries}); exiting with Codex's exit code"
            )
        return attempt.code


async def _run_codex(
    argv: list[str], env: Mapping[str, str], options: RunOptions, sinks: _Sinks, *, first: bool = False
) -> _Attempt:
    """Run Codex once in the workspace; its exit code and (exec mode) the thread id it reported."""
    exec_mode = options.codex_args.exec_mode
    log.info("running %s in %s", " ".join(argv[:3]), options.spec.root)
    pipe = subprocess.PIPE if exec_mode else None
    child = await spawn(
        argv,
        env=env,
        cwd=options.spec.root,
        stdin=None if first else subprocess.DEVNULL,
        stdout=pipe,
        stderr=pipe,
    )
    attempt = _Attempt(code=0)

    def on_line(line: bytes) -> None:
        if attempt.thread_id is None and line.startswith(b"{") and b"thread.started" in line:
            with contextlib.suppress(ValidationError, ValueError):
                attempt.thread_id = ThreadStarted.model_validate(json.loads(line)).thread_id

    pumps = []
    if child.stdout is not None:
        pumps.append(asyncio.create_task(_pump(child.stdout, sinks.stdout, sinks.log_file, on_line)))
    if child.stderr is not None:
        pumps.append(asyncio.create_task(_pump(child.stderr, sinks.stderr, sinks.log_file, None)))
    try:
        await child.wait_exit()
    finally:
        code = await _end(child, options.kill_grace)
        if pumps:
            _, pending = await asyncio.wait(pumps, timeout=PIPE_WAIT)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
    attempt.code = code
    log.info("Codex exited with %d", code)
    return attempt


async def _end(child: ChildProcess, grace: float) -> int:
    """End what is left of Codex's tree; its exit code (128 + N when a signal N ended it)."""
    code = await terminate_tree(child, grace)
    if code is None:
        return 1
    return 128 - code if code < 0 else code


async def _pump(
    stream: asyncio.StreamReader, target: BinaryIO, log_file: BinaryIO | None, on_line: Callable[[bytes], None] | None
) -> None:
    """Copy ``stream`` line by line to ``target`` (and ``log_file``), flushing each line."""
    while line := await stream.readline():
        if on_line is not None:
            on_line(line)
        target.write(line)
        target.flush()
        if log_file is not None:
            log_file.write(line)
            log_file.flush()
