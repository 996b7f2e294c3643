"""The real Codex CLI calls spells through the shim; the results reach the model and the rollout."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest

from coven_codex.mcp import SpellRegistry, SpellServer, codex_mcp_entry
from coven_codex.testing import CallTool, Reply, ScriptedModelServer, write_codex_config


async def run_exec(codex_bin: Path, workspace: Path, env: dict[str, str], prompt: str) -> tuple[int, bytes, bytes]:
    """``codex exec --json PROMPT`` in ``workspace``: its exit code, stdout and stderr (killed after 180 s)."""
    process = await asyncio.create_subprocess_exec(
        str(codex_bin),
        "exec",
        "--json",
        "--skip-git-repo-check",
        prompt,
        cwd=workspace,
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(180):
            stdout, stderr = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode, stdout, stderr


@pytest.mark.codex
async def test_real_codex_calls_spells(
    codex_bin: Path, codex_version: str, registry: SpellRegistry, tmp_path: Path
) -> None:
    script = [
        CallTool("coven.add", {"a": 20, "b": 22}, call_id="call-add"),
        CallTool("coven.stats", {"points": [{"x": 1, "y": 1}]}, call_id="call-stats"),
        CallTool("coven.explode", {"message": "on purpose"}, call_id="call-explode"),
        CallTool("coven.add", {"a": "twenty"}, call_id="call-bad"),
        CallTool("coven.progress", {"steps": 3}, call_id="call-progress"),
        Reply("all spells cast"),
    ]
    home = tmp_path / "home"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    async with SpellServer(registry, label="e2e") as spells, ScriptedModelServer(script) as model:
        entry = codex_mcp_entry(spells.socket_path, spells.secret, codex_version, tool_timeout=registry.longest_timeout)
        env = write_codex_config(home, model.base_url, mcp_servers={"coven": entry})
        returncode, stdout, stderr = await run_exec(codex_bin, workspace, env, "cast the spells")
    assert returncode == 0, stderr.decode()[-3000:]
    outputs = {output.call_id: output.output for output in model.requests.function_call_outputs()}
    assert set(outputs) == {"call-add", "call-stats", "call-explode", "call-bad", "call-progress"}, outputs
    assert "42" in outputs["call-add"]
    assert '"total":2.0' in outputs["call-stats"].replace(" ", "")
    assert "spell 'explode' failed: RuntimeError: kaboom: on purpose" in outputs["call-explode"]
    assert "Traceback" not in outputs["call-explode"]
    assert "invalid arguments for spell 'add': a: Input should be a valid integer" in outputs["call-bad"]
    assert "done" in outputs["call-progress"]  # progress notifications (0.169 asks for them) are fine
    assert any(
        json.loads(line).get("item", {}).get("text") == "all spells cast"
        for line in stdout.decode().splitlines()
        if line.startswith("{")
    )

    (rollout,) = list((home / "sessions").rglob("rollout-*.jsonl"))
    recorded = {}
    for line in rollout.read_text().splitlines():
        record = json.loads(line)
        payload = record.get("payload", {})
        if record.get("type") == "response_item" and payload.get("type") == "function_call_output":
            recorded[payload["call_id"]] = json.dumps(payload["output"])
    assert set(recorded) == set(outputs)
    assert "42" in recorded["call-add"]
    assert "kaboom: on purpose" in recorded["call-explode"]


@pytest.mark.codex
async def test_real_codex_without_the_daemon_says_why(codex_bin: Path, codex_version: str, tmp_path: Path) -> None:
    """Codex run on the daemon's config while the daemon is down: the shim's reason reaches the user.

    The entry is ``required`` (see ``coven_codex/mcp/codex_entry.py``): 0.169 refuses the session
    with the shim's message; 0.47 ignores ``required``, answers without spells and reports it."""
    home = tmp_path / "home"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    async with ScriptedModelServer([Reply("answered anyway")]) as model:
        entry = codex_mcp_entry(tmp_path / "gone.sock", "a-secret-of-sufficient-length", codex_version)
        env = write_codex_config(home, model.base_url, mcp_servers={"coven": entry})
        returncode, stdout, stderr = await run_exec(codex_bin, workspace, env, "hello")
    events = [json.loads(line) for line in stdout.decode().splitlines() if line.startswith("{")]
    if codex_version == "0.47.0":
        assert any(event.get("item", {}).get("text") == "answered anyway" for event in events)
        offered = json.dumps(model.requests.responses_requests()[0].json["tools"])
        assert "coven" not in offered  # no spells offered, and no crash
        reports = [event["message"] for event in events if event.get("type") == "error"]
    else:
        assert returncode != 0
        assert model.requests.responses_requests() == []  # nothing was sent without the spells
        reports = [stderr.decode()]
    assert any("the coven daemon is not running" in report and "coven-codex run" in report for report in reports), (
        reports
    )


@pytest.mark.codex
async def test_codex_waits_for_a_slowly_starting_spell_server(
    codex_bin: Path, codex_version: str, registry: SpellRegistry, tmp_path: Path
) -> None:
    """A loaded machine slows the shim's start (here: 3 s): Codex must wait for it before its first
    model request (the entry is ``required``), not offer that request without the spells."""
    home = tmp_path / "home"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    script = [CallTool("coven.add", {"a": 20, "b": 22}, call_id="call-add"), Reply("added")]
    async with SpellServer(registry, label="slow") as spells, ScriptedModelServer(script) as model:
        entry = codex_mcp_entry(spells.socket_path, spells.secret, codex_version)
        slow = {
            **entry,
            "command": "/bin/sh",
            "args": ["-c", 'sleep 3; exec "$0" "$@"', entry["command"], *entry["args"]],
        }
        env = write_codex_config(home, model.base_url, mcp_servers={"coven": slow})
        returncode, _, stderr = await run_exec(codex_bin, workspace, env, "add them")
    assert returncode == 0, stderr.decode()[-3000:]
    assert "coven" in json.dumps(model.requests.responses_requests()[0].json["tools"])
    (output,) = model.requests.function_call_outputs()
    assert "42" in output.output, output.output
