"""The shim as a process: relaying, clean exits, and clear errors when the daemon is not there."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from mcp_sample_spells import lingered

from coven_codex.mcp import SpellServer, codex_mcp_entry
from mcp_shim import wire

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


async def _start_shim(socket_path: Path | str, secret: str | None) -> asyncio.subprocess.Process:
    entry = codex_mcp_entry(socket_path, secret or "x", "0.169.0")
    env = dict(entry["env"])
    if secret is None:
        del env[wire.SECRET_ENV]
    return await asyncio.create_subprocess_exec(
        entry["command"],
        *entry["args"],
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def _exchange(process: asyncio.subprocess.Process, message: dict[str, Any]) -> dict[str, Any]:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(json.dumps(message).encode() + b"\n")
    await process.stdin.drain()
    line = await asyncio.wait_for(process.stdout.readline(), 10)
    assert line, "the shim closed stdout without answering"
    answer: dict[str, Any] = json.loads(line)
    return answer


async def _finish(process: asyncio.subprocess.Process) -> tuple[int, str]:
    assert process.stdin is not None
    if not process.stdin.is_closing():
        process.stdin.close()
    _, stderr = await asyncio.wait_for(process.communicate(), 10)
    assert process.returncode is not None
    return process.returncode, stderr.decode()


async def test_relays_and_exits_cleanly_when_stdin_closes(server: SpellServer) -> None:
    process = await _start_shim(server.socket_path, server.secret)
    answer = await _exchange(process, INITIALIZE)
    assert answer["result"]["protocolVersion"] == "2025-06-18"
    assert process.stdin is not None
    process.stdin.close()
    code, stderr = await _finish(process)
    assert code == 0
    assert stderr == ""


async def test_daemon_not_running_gives_stderr_and_an_mcp_error(tmp_path: Path) -> None:
    process = await _start_shim(tmp_path / "absent.sock", "a-secret-that-is-long-enough")
    answer = await _exchange(process, INITIALIZE)
    assert answer["id"] == 1
    assert answer["error"]["code"] == -32000
    assert "the coven daemon is not running" in answer["error"]["message"]
    code, stderr = await _finish(process)
    assert code == 1
    assert "coven-mcp-shim: the coven daemon is not running" in stderr
    assert "coven-codex run" in stderr


async def test_wrong_secret_is_reported_to_both(server: SpellServer) -> None:
    process = await _start_shim(server.socket_path, "wrong-secret-wrong-secret")
    answer = await _exchange(process, INITIALIZE)
    assert "refused this shim: wrong session secret" in answer["error"]["message"]
    code, stderr = await _finish(process)
    assert code == 1 and "wrong session secret" in stderr


async def test_wrong_secret_answers_every_request_until_stdin_closes(server: SpellServer) -> None:
    process = await _start_shim(server.socket_path, "wrong-secret-wrong-secret")
    discover = await _exchange(process, {"jsonrpc": "2.0", "id": "d", "method": "server/discover", "params": {}})
    assert discover["id"] == "d" and "wrong session secret" in discover["error"]["message"]
    answer = await _exchange(process, INITIALIZE)
    assert answer["id"] == 1 and "wrong session secret" in answer["error"]["message"]
    ping = await _exchange(process, {"jsonrpc": "2.0", "id": 2, "method": "ping"})
    assert ping["id"] == 2 and ping["error"]["code"] == -32000
    code, _ = await _finish(process)
    assert code == 1


async def test_closing_stdin_cancels_a_call_in_flight(server: SpellServer) -> None:
    process = await _start_shim(server.socket_path, server.secret)
    await _exchange(process, INITIALIZE)
    assert process.stdin is not None
    process.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode() + b"\n")
    process.stdin.write(
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 5,
                "method": "tools/call",
                "params": {"name": "linger", "arguments": {"tag": "stdin-closed"}},
            }
        ).encode()
        + b"\n"
    )
    await process.stdin.drain()
    await asyncio.sleep(0.3)
    process.stdin.close()
    code, _ = await _finish(process)
    assert code == 0
    for _ in range(50):
        if "stdin-closed" in lingered:
            break
        await asyncio.sleep(0.1)
    assert "stdin-closed" in lingered
    assert server.connection_count == 0


async def test_missing_secret_is_reported(server: SpellServer) -> None:
    process = await _start_shim(server.socket_path, None)
    answer = await _exchange(process, INITIALIZE)
    assert wire.SECRET_ENV in answer["error"]["message"]
    code, _ = await _finish(process)
    assert code == 1


async def test_shim_exits_when_the_daemon_goes_away(registry: Any) -> None:
    async with SpellServer(registry) as running:
        process = await _start_shim(running.socket_path, running.secret)
        await _exchange(process, INITIALIZE)
    # The shim ends by itself when the daemon goes: wait for that before closing its stdin (an end of
    # its stdin is a clean exit 0; closed at once, a loaded machine let the shim see it first).
    await asyncio.wait_for(process.wait(), 10)
    code, stderr = await _finish(process)
    assert code == 1
    assert "the coven daemon closed the connection" in stderr


def test_module_and_script_entry_points_start() -> None:
    import shutil
    import subprocess
    import sys

    script = Path(sys.executable).with_name("coven-mcp-shim")
    commands = [[sys.executable, "-m", "mcp_shim", "--version"]]
    if script.exists() or shutil.which("coven-mcp-shim"):
        commands.append([str(script if script.exists() else shutil.which("coven-mcp-shim")), "--version"])
    for command in commands:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=True)
        assert done.stdout.strip() == f"coven-mcp-shim {wire.SHIM_VERSION}"
    bad = subprocess.run(
        [sys.executable, "-m", "mcp_shim", "--bogus"], capture_output=True, text=True, timeout=30, check=False
    )
    assert bad.returncode == 2 and "unexpected argument '--bogus'" in bad.stderr
