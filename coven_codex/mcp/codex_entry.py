"""The ``[mcp_servers.coven]`` table of Codex's ``config.toml`` that launches the shim.

Verified on the real CLIs: 0.169.0 and 0.47.0 both accept ``startup_timeout_sec`` and
``tool_timeout_sec``; ``default_tools_approval_mode`` exists in 0.169.0 (without it a tool call
fails with "requires approval" under ``approval_policy = "never"``), is unknown to 0.47.0 (which
ignores unknown keys and needs no approval), so it is written for every version after 0.47.

``required = true`` makes Codex wait for the spell server before a thread's first model
request, and refuse the thread with "required MCP servers failed to initialize: coven: …" if it
cannot start. Without it, 0.169.0 (``exec`` and ``app-server``) sends the first request while
the server is still starting, and on a loaded machine the first turn silently lacked every
spell ("unsupported call"). 0.47.0 ignores the key (it always waits).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from coven_codex.codex.version import VersionError, parse_version
from mcp_shim import wire

SERVER_NAME = "coven"
STARTUP_TIMEOUT = 20.0
TOOL_TIMEOUT_MARGIN = 10.0


def supports_approval_mode(codex_version: str | None) -> bool:
    """Whether to write ``default_tools_approval_mode``; an unknown version gets it (harmless if ignored)."""
    if not codex_version:
        return True
    try:
        return parse_version(codex_version).supports_tools_approval_mode
    except VersionError:
        return True


def shim_command(socket_path: Path) -> tuple[str, list[str], dict[str, str]]:
    """How to start the shim without PATH: this interpreter, no ``site``, no ``runpy`` (fast).

    ``python -S <package>/__main__.py`` with the package's parent on ``PYTHONPATH`` starts in
    about the interpreter's own start-up time; ``-m`` would add runpy's imports.
    """
    package = Path(wire.__file__).resolve().parent
    args = ["-S", str(package / "__main__.py"), "--socket", str(socket_path)]
    return sys.executable, args, {"PYTHONPATH": str(package.parent)}


def codex_mcp_entry(
    socket_path: Path | str,
    secret: str,
    codex_version: str | None,
    *,
    startup_timeout: float = STARTUP_TIMEOUT,
    tool_timeout: float | None = None,
) -> dict[str, Any]:
    """The ``[mcp_servers.coven]`` table for ``codex_version`` (merge it under ``mcp_servers``).

    ``tool_timeout`` should exceed the longest spell timeout (``registry.longest_timeout``) so
    that the spell's own timeout, with its clear message, fires first.
    """
    command, args, env = shim_command(Path(socket_path))
    env[wire.SECRET_ENV] = secret
    entry: dict[str, Any] = {
        "command": command,
        "args": args,
        "env": env,
        "startup_timeout_sec": float(startup_timeout),
        "required": True,
    }
    if tool_timeout is not None:
        entry["tool_timeout_sec"] = float(tool_timeout + TOOL_TIMEOUT_MARGIN)
    if supports_approval_mode(codex_version):
        entry["default_tools_approval_mode"] = "approve"
    return entry
