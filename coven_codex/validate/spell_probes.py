"""Probes of the spell path: spells import with valid schemas, the shim starts, the handshake works.

The handshake probe does for real what Codex will do: it starts a spell server on a private
socket, launches the shim as a child process with the session secret, and speaks MCP
(``initialize``, ``tools/list``) through it. Everything it starts is ended before it returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from coven_codex.codex.process import run_captured
from coven_codex.mcp import SpellLoadError, SpellRegistry, SpellServer, load_configured_spells, toolbelt
from coven_codex.mcp.codex_entry import shim_command
from coven_codex.validate.framework import ProbeContext, ProbeResult
from mcp_shim import wire

SHIM_START_BOUND = 1.0
SPELLS_FACT = "spell_registry"


async def probe_spells(context: ProbeContext) -> ProbeResult:
    """The configured spells import and give valid tool schemas (passes when none are configured)."""
    sources = context.settings.spells
    try:
        registry = await asyncio.to_thread(load_configured_spells, sources, workspace=context.settings.workspace)
        described = toolbelt(registry)
        json.dumps(described)
    except SpellLoadError as exc:
        fix = (
            "Move the module out of the workspace or install it as a package (pip install)."
            if "inside the workspace" in str(exc)
            else "Fix the module:object in --spells / coven.toml, or the spell itself."
        )
        return ProbeResult.fail(str(exc), fix)
    except Exception as exc:  # importing user code can raise anything
        return ProbeResult.fail(
            f"importing the spells raised {type(exc).__name__}: {exc}",
            "Run `python -c 'import <module>'` to see the error, and fix the module.",
        )
    context.facts[SPELLS_FACT] = registry
    if not sources:
        return ProbeResult.ok("no spells configured (Codex gets no coven tools); add --spells module:object")
    names = ", ".join(sorted(tool["name"] for tool in described["tools"]))
    return ProbeResult.ok(f"{len(described['tools'])} spell(s) with valid schemas: {names}")


async def probe_shim_version(context: ProbeContext) -> ProbeResult:
    """The MCP shim starts and answers ``--version`` in time."""
    command, _, extra_env = shim_command(Path("unused.sock"))
    argv = [command, "-S", "-m", "mcp_shim", "--version"]
    started = time.monotonic()
    try:
        done = await asyncio.to_thread(run_captured, argv, env={**os.environ, **extra_env}, timeout=SHIM_START_BOUND)
    except subprocess.TimeoutExpired:  # run_captured has ended the whole process group
        return ProbeResult.fail(
            f"the shim did not answer --version within {SHIM_START_BOUND:g} s",
            "The machine is overloaded or Python starts slowly; check `python -S -m mcp_shim --version` by hand.",
        )
    except OSError as exc:
        return ProbeResult.fail(
            f"cannot start the shim with {command}: {exc}",
            "Reinstall coven-codex in this environment (pip install -e .).",
        )
    elapsed = time.monotonic() - started
    if done.returncode != 0 or not done.stdout.startswith("coven-mcp-shim "):
        return ProbeResult.fail(
            f"`{' '.join(argv)}` failed (exit {done.returncode}): {done.stderr.strip()[:200]}",
            "Reinstall coven-codex in this environment (pip install -e .).",
        )
    return ProbeResult.ok(f"{done.stdout.strip()} answered in {elapsed * 1000:.0f} ms")


async def probe_shim_handshake(context: ProbeContext) -> ProbeResult:
    """The shim connects to a real spell server and a ``tools/list`` round trip succeeds."""
    registry = context.facts.get(SPELLS_FACT)
    if not isinstance(registry, SpellRegistry):
        registry = SpellRegistry()
    async with SpellServer(registry, label="validate") as server:
        command, args, extra_env = shim_command(server.socket_path)
        env = {**os.environ, **extra_env, wire.SECRET_ENV: server.secret}
        process = await asyncio.create_subprocess_exec(
            command,
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        try:
            started = time.monotonic()
            answer = await _exchange(
                process,
                [
                    {
                        "jsonrpc": "2.0",
                        "id": 1,
                        "method": "initialize",
                        "params": {
                            "protocolVersion": "2025-06-18",
                            "capabilities": {},
                            "clientInfo": {"name": "coven-codex-validate", "version": "1"},
                        },
                    },
                    {"jsonrpc": "2.0", "method": "notifications/initialized"},
                    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                ],
                wait_for_id=2,
            )
            elapsed = time.monotonic() - started
        finally:
            if process.stdin is not None:
                process.stdin.close()
            try:
                async with asyncio.timeout(2):
                    _, err = await process.communicate()
            except TimeoutError:  # end the shim and anything it started, which may hold the pipes
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                _, err = await process.communicate()
    if answer is None:
        return ProbeResult.fail(
            f"the shim gave no tools/list answer: {err.decode(errors='replace').strip()[:200]}",
            "Run `coven-codex validate --log-level DEBUG` to see the daemon's side of the handshake.",
        )
    if "error" in answer:
        return ProbeResult.fail(
            f"tools/list through the shim failed: {answer['error']}",
            "Report this with the daemon log; the spell server refused the request.",
        )
    count = len(answer.get("result", {}).get("tools", []))
    return ProbeResult.ok(
        f"shim ↔ socket handshake and tools/list round trip in {elapsed * 1000:.0f} ms ({count} tool(s))"
    )


async def _exchange(
    process: asyncio.subprocess.Process, messages: list[dict[str, Any]], wait_for_id: int
) -> dict[str, Any] | None:
    assert process.stdin is not None and process.stdout is not None
    try:
        for message in messages:
            process.stdin.write(json.dumps(message).encode() + b"\n")
        await process.stdin.drain()
    except (BrokenPipeError, ConnectionResetError):
        return None  # the shim is gone already; its stderr says why
    while line := await process.stdout.readline():
        with contextlib.suppress(json.JSONDecodeError):
            data = json.loads(line)
            if isinstance(data, dict) and data.get("id") == wait_for_id:
                return data
    return None
