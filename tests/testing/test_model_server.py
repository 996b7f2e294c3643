"""The scripted model server over real sockets, and against the real Codex CLI."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tomlkit

from coven_codex.testing import (
    EXHAUSTED_TEXT,
    CallTool,
    Disconnect,
    ErrorEvent,
    HttpError,
    Reasoning,
    RecordedRequest,
    Reply,
    RunCommand,
    ScriptedModelServer,
    Stall,
    command_responder,
    echo_responder,
    tool_rule,
    write_codex_config,
)
from coven_codex.testing.mcp_echo_server import mcp_server_entry
from coven_codex.testing.responses_sse import resolve_tool

NAMESPACED_TOOLS: list[dict[str, Any]] = [
    {"type": "function", "name": "exec_command"},
    {"type": "namespace", "name": "mcp__echo", "tools": [{"type": "function", "name": "echo"}]},
]
FLAT_TOOLS: list[dict[str, Any]] = [{"type": "function", "name": "shell"}, {"type": "function", "name": "echo__echo"}]


def responses_body(
    *user_texts: str, tools: list[dict[str, Any]] | None = None, tail: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<environment_context>x"}]}
    ]
    items += [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": t}]} for t in user_texts]
    return {"model": "m", "stream": True, "input": items + (tail or []), "tools": tools or FLAT_TOOLS}


class Client:
    """A keep-alive HTTP/1.1 client speaking just enough to test the server."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, server: ScriptedModelServer) -> Client:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        return cls(reader, writer)

    async def request(
        self, method: str, path: str, body: bytes = b"", *, chunked: bool = False, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        head = [f"{method} {path} HTTP/1.1", "host: x", *(f"{k}: {v}" for k, v in (headers or {}).items())]
        if chunked:
            head.append("transfer-encoding: chunked")
            payload = b"".join(
                b"%x\r\n%s\r\n" % (len(body[i : i + 7]), body[i : i + 7]) for i in range(0, len(body), 7)
            )
            payload += b"0\r\n\r\n"
        else:
            head.append(f"content-length: {len(body)}")
            payload = body
        self.writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
        await self.writer.drain()
        status_line = await self.reader.readline()
        status = int(status_line.split()[1])
        response_headers: dict[str, str] = {}
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            response_headers[name.strip().lower()] = value.strip()
        if response_headers.get("transfer-encoding") == "chunked":
            data = b""
            while size := int((await self.reader.readline()).strip(), 16):
                data += await self.reader.readexactly(size)
                await self.reader.readline()
            await self.reader.readline()
        else:
            data = await self.reader.readexactly(int(response_headers["content-length"]))
        return status, response_headers, data

    async def post_responses(self, body: dict[str, Any]) -> tuple[int, list[dict[str, Any]] | Any]:
        status, headers, data = await self.request("POST", "/v1/responses", json.dumps(body).encode())
        if headers.get("content-type") == "text/event-stream":
            return status, sse_events(data)
        return status, json.loads(data)

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


def sse_events(data: bytes) -> list[dict[str, Any]]:
    events = []
    for frame in data.decode().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in frame.splitlines() if ": " in line)
        if "data" in lines:
            event = json.loads(lines["data"])
            assert lines["event"] == event["type"]
            events.append(event)
    return events


def done_items(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["item"] for e in events if e["type"] == "response.output_item.done"]


async def test_reply_streams_deltas_then_the_whole_message() -> None:
    async with ScriptedModelServer([Reply("hello world", chunk_size=4)]) as server:
        client = await Client.connect(server)
        status, events = await client.post_responses(responses_body("hi"))
        await client.close()
    assert status == 200
    types = [e["type"] for e in events]
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert [e["delta"] for e in events if e["type"] == "response.output_text.delta"] == ["hell", "o wo", "rld"]
    assert done_items(events) == [
        {
            "type": "message",
            "id": "msg_2",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "hello world", "annotations": []}],
        }
    ]
    assert events[-1]["response"]["id"] == events[0]["response"]["id"]
    assert server.requests.turn_prompts() == ["hi"]


async def test_one_entry_with_several_steps_is_one_response_and_keep_alive_serves_the_next() -> None:
    script = [(Reasoning("plan"), Reply("a")), Reply("b")]
    async with ScriptedModelServer(script) as server:
        client = await Client.connect(server)
        _, first = await client.post_responses(responses_body("one"))
        _, second = await client.post_responses(responses_body("one", "two"))
        await client.close()
    assert [item["type"] for item in done_items(first)] == ["reasoning", "message"]
    assert done_items(first)[0]["summary"] == [{"type": "summary_text", "text": "plan"}]
    assert done_items(second)[0]["content"][0]["text"] == "b"
    assert server.requests.user_texts() == ["one", "two"]
    assert server.requests.turn_prompts() == ["one", "two"]


@pytest.mark.parametrize(
    ("tools", "expected"),
    [(NAMESPACED_TOOLS, ("echo", "mcp__echo")), (FLAT_TOOLS, ("echo__echo", None))],
    ids=["0.169-namespace", "0.47-flat"],
)
async def test_call_tool_takes_the_wire_form_of_the_offered_tools(
    tools: list[dict[str, Any]], expected: tuple[str, str | None]
) -> None:
    async with ScriptedModelServer([CallTool("echo.echo", {"text": "x"}, call_id="c1")]) as server:
        client = await Client.connect(server)
        _, events = await client.post_responses(responses_body("hi", tools=tools))
        await client.close()
    (item,) = done_items(events)
    assert (item["name"], item.get("namespace")) == expected
    assert item["call_id"] == "c1" and json.loads(item["arguments"]) == {"text": "x"}


def test_tool_names_are_resolved_in_every_spelling() -> None:
    for spelling in ("echo.echo", "echo__echo", "mcp__echo__echo"):
        assert resolve_tool(spelling, NAMESPACED_TOOLS) == ("echo", "mcp__echo")
        assert resolve_tool(spelling, FLAT_TOOLS) == ("echo__echo", None)
    assert resolve_tool("exec_command", NAMESPACED_TOOLS) == ("exec_command", None)
    assert resolve_tool("nope.tool", FLAT_TOOLS) == ("nope.tool", None)


async def test_run_command_uses_the_offered_shell_tool() -> None:
    async with ScriptedModelServer([RunCommand("ls"), RunCommand("ls")]) as server:
        client = await Client.connect(server)
        _, new = await client.post_responses(responses_body("hi", tools=NAMESPACED_TOOLS))
        _, old = await client.post_responses(responses_body("hi", tools=FLAT_TOOLS))
        await client.close()
    assert (done_items(new)[0]["name"], json.loads(done_items(new)[0]["arguments"])) == ("exec_command", {"cmd": "ls"})
    assert json.loads(done_items(old)[0]["arguments"]) == {"command": ["bash", "-lc", "ls"]}


async def test_http_error_answers_json_and_repeats_as_often_as_asked() -> None:
    script = [
        HttpError(429, "slow down", times=2, headers=(("retry-after", "1"),)),
        HttpError(500, body={"x": 1}),
        Reply("ok"),
    ]
    async with ScriptedModelServer(script) as server:
        client = await Client.connect(server)
        results = [
            await client.request("POST", "/v1/responses", json.dumps(responses_body("hi")).encode()) for _ in range(4)
        ]
        await client.close()
    assert [status for status, _, _ in results] == [429, 429, 500, 200]
    assert json.loads(results[0][2])["error"]["message"] == "slow down"
    assert results[1][1]["retry-after"] == "1"
    assert json.loads(results[2][2]) == {"x": 1}


async def test_error_event_ends_the_stream_with_response_failed() -> None:
    async with ScriptedModelServer(
        [(Reply("partial"), ErrorEvent("exploded", code="server_error")), ErrorEvent("bare", event="error")]
    ) as server:
        client = await Client.connect(server)
        _, failed = await client.post_responses(responses_body("hi"))
        _, bare = await client.post_responses(responses_body("hi"))
        await client.close()
    error = {"code": "server_error", "message": "exploded"}
    assert failed[-1] == {
        "type": "response.failed",
        "response": {"id": failed[0]["response"]["id"], "status": "failed", "error": error},
    }
    assert bare[-1]["type"] == "error" and bare[-1]["message"] == "bare"


async def test_stall_delays_the_stream_and_disconnect_cuts_it() -> None:
    async with ScriptedModelServer([(Stall(0.3), Reply("late")), (Reply("x"), Disconnect())]) as server:
        client = await Client.connect(server)
        started = asyncio.get_running_loop().time()
        await client.post_responses(responses_body("hi"))
        assert asyncio.get_running_loop().time() - started >= 0.3
        with pytest.raises((asyncio.IncompleteReadError, ValueError, ConnectionError)):
            await client.post_responses(responses_body("hi"))
        await client.close()


async def test_chunked_and_gzip_request_bodies_are_decoded_and_other_paths_recorded() -> None:
    async with ScriptedModelServer([Reply("a"), Reply("b")]) as server:
        client = await Client.connect(server)
        body = json.dumps(responses_body("chunked")).encode()
        status, _, _ = await client.request("POST", "/v1/responses", body, chunked=True)
        assert status == 200
        status, _, _ = await client.request(
            "POST",
            "/v1/responses",
            gzip.compress(json.dumps(responses_body("zipped")).encode()),
            headers={"content-encoding": "gzip"},
        )
        assert status == 200
        status, _, data = await client.request("GET", "/v1/models")
        assert status == 200 and json.loads(data)["data"][0]["id"] == "m"
        status, _, _ = await client.request("GET", "/elsewhere")
        assert status == 404
        status, _, _ = await client.request("POST", "/v1/responses", b"x", headers={"content-encoding": "br"})
        assert status == 415
        await client.close()
    assert server.requests.turn_prompts() == ["chunked", "zipped"]
    assert [r.path for r in server.requests.other_requests()] == ["/v1/models", "/elsewhere"]
    assert len(server.requests.responses_requests()) == 3


async def test_exhausted_script_falls_back_to_the_responder() -> None:
    async with ScriptedModelServer() as bare, ScriptedModelServer([Reply("first")], responder=echo_responder) as echo:
        for server, expected in ((bare, [EXHAUSTED_TEXT]), (echo, ["first", "echo: again"])):
            client = await Client.connect(server)
            texts = []
            for _ in expected:
                _, events = await client.post_responses(responses_body("again"))
                texts.append(done_items(events)[0]["content"][0]["text"])
            await client.close()
            assert texts == expected
            assert server.remaining == 0


async def test_wait_for_wakes_when_requests_arrive() -> None:
    async with ScriptedModelServer(responder=echo_responder) as server:
        waiter = asyncio.create_task(server.requests.wait_for(1))
        await asyncio.sleep(0.05)
        assert not waiter.done()
        client = await Client.connect(server)
        await client.post_responses(responses_body("hi"))
        await client.close()
        async with asyncio.timeout(5):
            await waiter


def request_with(*texts: str, tail: list[dict[str, Any]] | None = None) -> RecordedRequest:
    return RecordedRequest("POST", "/v1/responses", {}, json.dumps(responses_body(*texts, tail=tail)).encode())


def test_responders_echo_call_tools_and_report_results() -> None:
    tool_output = [
        {"type": "function_call", "call_id": "c", "name": "echo__echo", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "echo: x"},
    ]
    assert echo_responder(request_with("hi")) == Reply("echo: hi")
    assert echo_responder(request_with("hi", tail=tool_output)) == Reply("tool result: echo: x")
    rule = tool_rule(r"shout (?P<text>\w+)", "echo.echo")
    assert rule(request_with("please shout loud")) == CallTool("echo.echo", {"text": "loud"})
    assert rule(request_with("nothing")) == Reply("echo: nothing")
    assert command_responder(request_with('/tool echo.add {"a": 1, "b": 2}')) == CallTool("echo.add", {"a": 1, "b": 2})
    assert command_responder(request_with("/error 401 bad key")) == HttpError(401, "bad key")
    assert command_responder(request_with("/fail")) == ErrorEvent("scripted failure")
    assert command_responder(request_with("/stall 2 ok")) == (Stall(2.0), Reply("ok"))
    assert command_responder(request_with("/think deep")) == (Reasoning("deep"), Reply("thought about: deep"))
    assert command_responder(request_with("/tool echo.echo {bad")) == Reply("/tool arguments are not JSON: {bad")


def test_config_points_codex_at_the_server(tmp_path: Path) -> None:
    env = write_codex_config(
        tmp_path / "home",
        "http://127.0.0.1:9/v1",
        mcp_servers={"echo": {"command": "x"}},
        extra={"model_providers": {"local": {"request_max_retries": 2}}, "tui": {"a": 1}},
    )
    config = tomlkit.parse((tmp_path / "home" / "config.toml").read_text()).unwrap()
    provider = config["model_providers"]["local"]
    assert (config["model"], config["model_provider"]) == ("m", "local")
    assert provider["base_url"] == "http://127.0.0.1:9/v1" and provider["wire_api"] == "responses"
    assert provider["request_max_retries"] == 2 and provider["stream_max_retries"] == 0
    assert config["mcp_servers"] == {"echo": {"command": "x"}} and config["tui"] == {"a": 1}
    assert env == {"CODEX_HOME": str(tmp_path / "home"), provider["env_key"]: "scripted-test-key"}


async def test_command_line_server_prints_its_url_and_serves(tmp_path: Path) -> None:
    record = tmp_path / "requests.jsonl"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "coven_codex",
        "model-server",
        "--port",
        "0",
        "--script",
        "commands",
        "--record",
        str(record),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(20):
            url = (await proc.stdout.readline()).decode().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        reader, writer = await asyncio.open_connection("127.0.0.1", int(url.rsplit(":", 1)[1].split("/")[0]))
        client = Client(reader, writer)
        _, events = await client.post_responses(responses_body("ping"))
        assert done_items(events)[0]["content"][0]["text"] == "echo: ping"
        status, _, _ = await client.request(
            "POST",
            "/v1/responses",
            json.dumps(responses_body("/error 401")).encode(),
            headers={"authorization": "Bearer secret"},
        )
        assert status == 401
        await client.close()
    finally:
        proc.terminate()
        assert await proc.wait() == 0
    recorded = [json.loads(line) for line in record.read_text().splitlines()]
    assert [r["body"]["input"][-1]["content"][0]["text"] for r in recorded] == ["ping", "/error 401"]
    assert recorded[1]["headers"]["authorization"] == "<redacted>" and "secret" not in record.read_text()


@pytest.mark.parametrize("form", [["-m", "coven_codex", "model-server"], ["-m", "coven_codex.testing"]])
async def test_the_model_server_command_prints_the_base_config_to_use(tmp_path: Path, form: list[str]) -> None:
    """`coven-codex model-server` (and `python -m coven_codex.testing`) serve and print a usable base config."""
    written = tmp_path / "offline.toml"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *form, "--write-config", str(written), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(20):
            url = (await proc.stdout.readline()).decode().strip()
            printed = (await proc.stdout.readuntil(b"stream_idle_timeout_ms = 60000\n")).decode()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
    finally:
        proc.terminate()
        _, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    assert "Warning" not in err.decode()
    config = tomlkit.parse(written.read_text()).unwrap()
    assert config["model_providers"]["local"]["base_url"] == url
    assert written.read_text() in printed
    assert f"export {config['model_providers']['local']['env_key']}=" in printed


@pytest.mark.codex
async def test_real_codex_runs_a_tool_turn_against_the_server(codex_bin: Path, tmp_path: Path) -> None:
    script = [(Reasoning("need a tool"), CallTool("echo.echo", {"text": "ping"})), Reply("all done")]
    async with ScriptedModelServer(script) as server:
        env = write_codex_config(tmp_path / "home", server.base_url, mcp_servers={"echo": mcp_server_entry()})
        workspace = tmp_path / "ws"
        workspace.mkdir()
        proc = await asyncio.create_subprocess_exec(
            str(codex_bin),
            "exec",
            "--json",
            "--skip-git-repo-check",
            "hi there",
            cwd=workspace,
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        async with asyncio.timeout(120):
            stdout, stderr = await proc.communicate()
    assert proc.returncode == 0, stderr.decode()[-2000:]
    assert server.requests.turn_prompts() == ["hi there"]
    (output,) = server.requests.function_call_outputs()
    assert "echo: ping" in output.output
    messages = [json.loads(line) for line in stdout.decode().splitlines() if line.startswith("{")]
    assert any(m.get("item", {}).get("text") == "all done" for m in messages)
