"""``coven-codex mcp-serve`` driven by the official MCP clients (issue 15, item 3): the Python SDK
(``mcp``) and the TypeScript SDK start it on stdio, as Claude Code or Cursor would, while the
daemon runs the real Codex 0.169.0 against the scripted model.

call_codex returns the job id at once (or the finished record when asked to wait), call_status
is polled to the end, call_jobs lists, call_cancel stops a running job; bad arguments and
unknown jobs are ``isError`` results.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from agent_harness import AgentHarness, make_responder
from mcp import Client, StdioServerParameters

from coven_codex.jobs.mcp_tools import PROGRESS_EVERY, job_tools
from coven_codex.journal import MemoryJournal
from coven_codex.support.limits import MAX_THOUGHT_CHARS
from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.steps import Reply, Stall

pytestmark = [pytest.mark.codex, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
TS_DRIVER = Path(__file__).with_name("ts_jobs_client.mjs")
Factory = Callable[[Path, ScriptedModelServer], AgentHarness]
TOOLS = ["call_codex", "call_status", "call_jobs", "call_cancel"]


@pytest.fixture
async def slow_server() -> ScriptedModelServer:
    responder = make_responder({"slow": lambda r: (Stall(600.0), Reply("too late"))})
    async with ScriptedModelServer(responder=responder) as server:
        yield server  # type: ignore[misc]


async def running_daemon(h: AgentHarness) -> None:
    h.write_base_config(model_providers={"local": {"stream_idle_timeout_ms": 3_600_000}})
    await h.start()
    await h.until_logged("ready (pid")


def serve_parameters(h: AgentHarness) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "coven_codex", "mcp-serve", "--journal", str(h.journal_path)], env=h.env
    )


def text(result: Any) -> str:
    return "".join(block.text for block in result.content if isinstance(block, mcp_types.TextContent))


async def poll(client: Client, job_id: str, *states: str) -> dict[str, Any]:
    """call_status until the job is in one of ``states`` (bounded)."""
    for _ in range(1200):
        result = await client.call_tool("call_status", {"job_id": job_id})
        assert not result.is_error, text(result)
        record: dict[str, Any] = result.structured_content
        if record["state"] in states:
            return record
        await asyncio.sleep(0.1)
    raise AssertionError(f"job {job_id} never reached {states}: {record}")


async def test_the_python_sdk_drives_mcp_serve(
    codex_bin_169: Path, slow_server: ScriptedModelServer, harness_factory: Factory
) -> None:
    h = harness_factory(codex_bin_169, slow_server)
    await running_daemon(h)
    async with Client(serve_parameters(h), mode="legacy") as client:
        tools = (await client.list_tools()).tools
        assert [tool.name for tool in tools] == TOOLS
        schema = next(tool for tool in tools if tool.name == "call_codex").input_schema
        assert schema["required"] == ["prompt"] and schema["additionalProperties"] is False
        assert all(tool.output_schema is not None and tool.description for tool in tools)
        started = await client.call_tool("call_codex", {"prompt": "hello mcp"})
        assert not started.is_error, text(started)
        job_id = started.structured_content["id"]
        assert started.structured_content["state"] in ("queued", "running")
        done = await poll(client, job_id, "succeeded", "failed")
        assert done["state"] == "succeeded" and done["final_message"] == "echo: hello mcp"
        assert done["thread_id"] and done["usage"]["total_tokens"]
        listed = await client.call_tool("call_jobs", {"state": "succeeded"})
        assert [job["id"] for job in listed.structured_content["jobs"]] == [job_id]
        waited = await client.call_tool("call_codex", {"prompt": "wait for me", "wait_for_result": True})
        assert waited.structured_content["final_message"] == "echo: wait for me"
        slow = (await client.call_tool("call_codex", {"prompt": "slow one"})).structured_content["id"]
        await poll(client, slow, "running")
        cancel = await client.call_tool("call_cancel", {"job_id": slow})
        assert not cancel.is_error and cancel.structured_content["state"] == "running"
        assert (await poll(client, slow, "cancelled", "failed", "succeeded"))["state"] == "cancelled"
        for name, arguments, says in [
            ("call_codex", {}, "invalid arguments for tool 'call_codex'"),
            ("call_codex", {"prompt": "x", "timeout": -1}, "invalid arguments"),
            ("call_codex", {"prompt": "x", "bogus": 1}, "invalid arguments"),
            ("call_status", {"job_id": 5}, "invalid arguments"),
            ("call_status", {"job_id": "nope"}, "no job 'nope'"),
            ("call_jobs", {"state": "sleeping"}, "invalid arguments"),
            ("call_cancel", {"job_id": "nope"}, "no job 'nope'"),
            (
                "call_codex",
                {"prompt": "x", "resume_session_id": "t", "continue_latest": True},
                "give resume_session_id or continue_latest, not both",
            ),
            ("call_codex", {"prompt": " "}, "the prompt is empty; pass prompt"),
        ]:
            refused = await client.call_tool(name, arguments)
            assert refused.is_error and says in text(refused), (name, arguments, text(refused))


@pytest.fixture(scope="module")
def ts_sdk() -> Path:
    """The pinned TypeScript SDK (installed on first use, as scripts/setup.sh does)."""
    assert shutil.which("node"), "Node.js is required (scripts/setup.sh checks for it)"
    done = subprocess.run(
        [str(ROOT / "scripts" / "install-npm-pinned.sh"), "mcp-sdk-js"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return Path(done.stdout.strip())


async def test_the_typescript_sdk_drives_mcp_serve(
    codex_bin_169: Path, model_server: ScriptedModelServer, harness_factory: Factory, ts_sdk: Path
) -> None:
    h = harness_factory(codex_bin_169, model_server)
    await running_daemon(h)
    launch = json.dumps(
        {
            "command": sys.executable,
            "args": ["-m", "coven_codex", "mcp-serve", "--journal", str(h.journal_path)],
            "env": h.env,
        }
    )
    process = await asyncio.create_subprocess_exec(
        "node", str(TS_DRIVER), str(ts_sdk), launch, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 200)
    assert process.returncode == 0, stderr.decode()[-2000:]
    seen = json.loads(stdout.decode().strip().splitlines()[-1])
    assert seen["tools"] == TOOLS
    assert seen["started"]["state"] in ("queued", "running")
    assert seen["done"]["state"] == "succeeded" and seen["done"]["final_message"] == "echo: hello ts"
    assert seen["listed"] == [seen["started"]["id"]]
    assert seen["bad"]["isError"] is True and "invalid arguments" in seen["bad"]["text"]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_mcp_serve_answers_without_a_daemon_in_both_sdk_modes(tmp_path: Path, mode: str) -> None:
    """The tools list and refusals need no daemon (only the journal): the SDK's ``auto`` mode
    (``server/discover`` first) and ``legacy`` mode both get them."""
    journal = tmp_path / "journal.jsonl"
    journal.touch()
    parameters = StdioServerParameters(
        command=sys.executable, args=["-m", "coven_codex", "mcp-serve", "--journal", str(journal)]
    )
    async with Client(parameters, mode=mode) as client:
        assert [tool.name for tool in (await client.list_tools()).tools] == TOOLS
        unknown = await client.call_tool("call_status", {"job_id": "nope"})
        assert unknown.is_error and "no job 'nope'" in text(unknown)
        listed = await client.call_tool("call_jobs", {})
        assert not listed.is_error and listed.structured_content == {"jobs": []}


async def test_call_codex_refuses_a_prompt_over_codex_input_limit_before_it_writes(tmp_path: Path) -> None:
    # Before: call_codex wrote it; the daemon refused it and the job stayed queued for ever.
    journal = tmp_path / "journal.jsonl"
    journal.touch()
    parameters = StdioServerParameters(
        command=sys.executable, args=["-m", "coven_codex", "mcp-serve", "--journal", str(journal)]
    )
    async with Client(parameters) as client:
        result = await client.call_tool("call_codex", {"prompt": "x" * (MAX_THOUGHT_CHARS + 1)})
        assert result.is_error and f"Codex accepts at most {MAX_THOUGHT_CHARS}" in text(result)
    assert journal.read_bytes() == b""


async def test_mcp_serve_refuses_a_journal_no_daemon_made(tmp_path: Path) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "coven_codex",
        "mcp-serve",
        "--journal",
        str(tmp_path / "missing.jsonl"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 2 and out == b""
    assert "does not exist, so no daemon serves it" in err.decode()


# Issue 26, item 12: the end of a session (the client closes mcp-serve's stdin) is a clean exit 0,
# whatever the client, and stdin/stdout may be regular files.
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "pipe", "version": "1"}},
}
CALL_JOBS = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "call_jobs", "arguments": {}}}
LIST = {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}
SESSION = b"".join(json.dumps(message).encode() + b"\n" for message in (INIT, CALL_JOBS, LIST))


def recorded_serve(tmp_path: Path) -> tuple[list[str], Path, Path]:
    """A command (``sh`` running mcp-serve on the inherited stdin/stdout) that records mcp-serve's
    exit code and stderr in the two files returned: the SDKs do not tell their server's exit."""
    journal = tmp_path / "journal.jsonl"
    journal.touch()
    rc, err = tmp_path / "rc", tmp_path / "stderr"
    script = '"$0" -m coven_codex mcp-serve --journal "$1" 2>"$2"; echo $? >"$3"'
    return ["sh", "-c", script, sys.executable, str(journal), str(err), str(rc)], rc, err


def assert_clean_exit(rc: Path, err: Path) -> None:
    assert rc.read_text().strip() == "0", err.read_text()
    assert "Traceback" not in err.read_text() and "Error" not in err.read_text(), err.read_text()


async def test_mcp_serve_exits_0_when_the_python_sdk_client_ends_the_session(tmp_path: Path) -> None:
    command, rc, err = recorded_serve(tmp_path)
    async with Client(StdioServerParameters(command=command[0], args=command[1:]), mode="legacy") as client:
        assert [tool.name for tool in (await client.list_tools()).tools] == TOOLS
    assert_clean_exit(rc, err)


async def test_mcp_serve_exits_0_when_the_typescript_sdk_client_ends_the_session(tmp_path: Path, ts_sdk: Path) -> None:
    command, rc, err = recorded_serve(tmp_path)
    launch = json.dumps({"command": command[0], "args": command[1:]})
    process = await asyncio.create_subprocess_exec(
        "node",
        str(TS_DRIVER.with_name("ts_close_client.mjs")),
        str(ts_sdk),
        launch,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, stderr.decode()[-2000:]
    assert json.loads(stdout.decode().strip().splitlines()[-1]) == {"tools": TOOLS, "jobs": {"jobs": []}}
    assert_clean_exit(rc, err)


def answers(raw: bytes) -> dict[int, Any]:
    return {message["id"]: message for message in map(json.loads, raw.decode().splitlines())}


async def test_mcp_serve_answers_a_plain_pipe_to_its_end_and_exits_0(tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    journal.touch()
    process = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "coven_codex", "mcp-serve", "--journal", str(journal)],
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(SESSION), 60)  # writes, then closes stdin
    assert process.returncode == 0, err.decode()
    assert "Traceback" not in err.decode()
    got = answers(out)
    assert sorted(got) == [1, 2, 3]  # the tool call in flight at the end of stdin is answered too
    assert got[2]["result"]["structuredContent"] == {"jobs": []}


@pytest.mark.parametrize("stdin_kind", ["pipe", "file"])
async def test_mcp_serve_answers_into_a_regular_file_stdout(tmp_path: Path, stdin_kind: str) -> None:
    journal = tmp_path / "journal.jsonl"
    journal.touch()
    requests = tmp_path / "requests.jsonl"
    requests.write_bytes(SESSION)
    out_path = tmp_path / "answers.jsonl"
    with out_path.open("wb") as out, requests.open("rb") as source:
        process = await asyncio.create_subprocess_exec(
            *[sys.executable, "-m", "coven_codex", "mcp-serve", "--journal", str(journal)],
            stdin=source if stdin_kind == "file" else asyncio.subprocess.PIPE,
            stdout=out,
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await asyncio.wait_for(process.communicate(None if stdin_kind == "file" else SESSION), 60)
    assert process.returncode == 0, err.decode()
    assert "Traceback" not in err.decode()
    assert sorted(answers(out_path.read_bytes())) == [1, 2, 3]


async def test_mcp_serve_without_a_stdout_says_so(tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    journal.touch()
    done = subprocess.run(
        ["sh", "-c", '"$0" -m coven_codex mcp-serve --journal "$1" >&-', sys.executable, str(journal)],
        input=SESSION,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.decode().strip() == (
        "coven-codex mcp-serve: stdout is closed; give this command a stdout to answer on (a pipe or a file)"
    )


LONG_JOB = 90.0
"""The model stalls this long before it answers a prompt starting with ``long``: past the
TypeScript SDK's default request timeout (60 s)."""


@pytest.fixture
async def long_server() -> ScriptedModelServer:
    responder = make_responder({"long": lambda r: (Stall(LONG_JOB), Reply("finished at last"))})
    async with ScriptedModelServer(responder=responder) as server:
        yield server  # type: ignore[misc]


@pytest.fixture(scope="module")
def inspector() -> Path:
    """The pinned MCP Inspector's CLI (installed on first use)."""
    assert shutil.which("node"), "Node.js is required (scripts/setup.sh checks for it)"
    done = subprocess.run(
        [str(ROOT / "scripts" / "install-npm-pinned.sh"), "mcp-inspector"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return Path(done.stdout.strip()) / "node_modules" / ".bin" / "mcp-inspector"


def exit_recording_server(h: AgentHarness, name: str) -> tuple[Path, Path]:
    """A script that runs ``mcp-serve`` (with the harness's environment) and writes its exit code to a
    file when it ends: (the script, the file). Every client starts the server as this one command."""
    script, code = h.tmp / f"serve-{name}.sh", h.tmp / f"serve-{name}.exit"
    exports = "".join(f"export {key}={shlex.quote(value)}\n" for key, value in h.env.items())
    serve = shlex.join([sys.executable, "-m", "coven_codex", "mcp-serve", "--journal", str(h.journal_path)])
    script.write_text(f"#!/bin/sh\n{exports}{serve}\necho $? > {shlex.quote(str(code))}\n")
    script.chmod(0o755)
    return script, code


async def python_sdk_long_call(h: AgentHarness) -> tuple[dict[str, Any], int, Path]:
    script, code = exit_recording_server(h, "python")
    notes: list[float] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        notes.append(value)

    async with Client(StdioServerParameters(command=str(script)), mode="legacy") as client:
        result = await client.call_tool(
            "call_codex", {"prompt": "long python", "wait_for_result": True}, progress_callback=progress
        )
        assert not result.is_error, text(result)
    return result.structured_content, len(notes), code


async def ts_sdk_long_call(h: AgentHarness, sdk: Path) -> tuple[dict[str, Any], int, Path]:
    script, code = exit_recording_server(h, "ts")
    launch = json.dumps({"command": str(script), "args": [], "env": h.env})
    driver = Path(__file__).with_name("ts_long_job_client.mjs")
    process = await asyncio.create_subprocess_exec(
        "node", str(driver), str(sdk), launch, "long ts", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), LONG_JOB + 120)
    assert process.returncode == 0, stderr.decode()[-2000:]
    seen = json.loads(stdout.decode().strip().splitlines()[-1])
    assert "error" not in seen, seen["error"]
    return seen["record"], len(seen["progress"]), code


async def inspector_call(h: AgentHarness, inspector: Path) -> tuple[dict[str, Any], int, Path]:
    """The Inspector CLI (2.12.0) has a fixed 60 s request timeout and sends no progress token, so
    no server can keep its call alive longer (docs/jobs.md): it waits for a short job, its
    ``timeout`` argument filled from a ``--tool-arg`` string by the schema's number type."""
    script, code = exit_recording_server(h, "inspector")
    process = await asyncio.create_subprocess_exec(
        str(inspector),
        "--cli",
        str(script),
        "--method",
        "tools/call",
        "--tool-name",
        "call_codex",
        "--tool-arg",
        "prompt=hello inspector",
        "wait_for_result=true",
        "timeout=300",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=h.env,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), LONG_JOB + 120)
    assert process.returncode == 0, (stdout.decode()[-2000:], stderr.decode()[-2000:])
    result = json.loads(stdout.decode())
    assert not result.get("isError"), result
    return result["structuredContent"], -1, code


async def test_a_90_s_call_codex_waits_to_its_end_in_the_sdks_and_mcp_serve_exits_0_for_every_client(
    codex_bin_169: Path, long_server: ScriptedModelServer, harness_factory: Factory, ts_sdk: Path, inspector: Path
) -> None:
    """The Python SDK and the TypeScript SDK (default 60 s request timeout, reset by progress) each
    wait for a 90 s job to its end, the Inspector CLI for a short one (its timeout cannot be
    raised); mcp-serve exits 0 when each disconnects."""
    h = harness_factory(codex_bin_169, long_server)
    await running_daemon(h)
    async with asyncio.timeout(LONG_JOB + 180):
        done = await asyncio.gather(python_sdk_long_call(h), ts_sdk_long_call(h, ts_sdk), inspector_call(h, inspector))
    for (record, progress, code), client in zip(done, ["python", "ts", "inspector"], strict=True):
        assert record["state"] == "succeeded", (client, record)
        if client == "inspector":
            assert record["final_message"] == "echo: hello inspector" and record["timeout"] == 300, record
        else:
            assert record["final_message"] == "finished at last" and record["duration"] >= LONG_JOB, (client, record)
        if progress >= 0:  # the clients that sent a progress token were told at least every PROGRESS_EVERY s
            assert progress >= LONG_JOB // PROGRESS_EVERY - 1, (client, progress)
        assert code.read_text().strip() == "0", client
    assert long_server.requests.responses_requests()


def test_call_codex_arguments_are_plain_types_every_client_can_fill() -> None:
    """No ``anyOf`` with null for a number or a boolean: the Inspector CLI converts a ``--tool-arg``
    by the property's ``type``, so an ``anyOf[number, null]`` timeout would be sent as a string."""
    schema = job_tools(MemoryJournal()).get("call_codex")
    assert schema is not None
    properties = schema.tool_definition()["inputSchema"]["properties"]
    assert properties["timeout"]["type"] == "number" and properties["timeout"]["default"] == 0
    assert properties["wait_for_result"]["type"] == "boolean"
    assert properties["continue_latest"]["type"] == "boolean"
