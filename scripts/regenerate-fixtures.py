#!/usr/bin/env python3
"""Regenerate tests/fixtures/rollouts/ from the real Codex CLIs and the scripted model server.

Usage: .venv/bin/python scripts/regenerate-fixtures.py [--version 0.169.0 ...] [--scenario NAME ...]

For every pinned Codex version and scenario it runs ``codex exec --json`` (and ``exec resume``
for later turns) in a temporary workspace against ScriptedModelServer, then stores:

- ``<version>/<scenario>.jsonl``: the rollout file, machine-specific paths replaced with
  placeholders (``/workspace``, ``/codex-home``, ``/python``, ``/repo``) and very long strings
  (instructions, skills text) cut, so fixtures stay a few KB while keeping every record;
- ``<version>/<scenario>.exec.jsonl``: what ``codex exec --json`` printed (one line per turn
  run, prefixed by a ``{"turn": n, "exit_code": ...}`` line), for errors that never reach the
  rollout; for app-server scenarios, the JSON-RPC messages the server sent (deltas left out).

``<version>/<scenario>.expected.jsonl`` (the entries a fixture must give) is written by hand,
never by this script: regenerating a fixture means checking those again.

The pinned CLIs come from scripts/install-codex.sh (``.codex-cli/<version>/``).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from coven_codex.testing import (  # noqa: E402
    CallTool,
    ErrorEvent,
    HttpError,
    OutputItem,
    Reasoning,
    Reply,
    RunCommand,
    ScriptedModelServer,
    Stall,
    TurnScript,
    write_codex_config,
)
from coven_codex.testing.mcp_echo_server import mcp_server_entry  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "rollouts"
VERSIONS = ("0.169.0", "0.47.0")
OTHER_VERSIONS = ("0.20.0", "0.58.0", "0.104.0", "0.118.0", "0.135.0", "0.147.0", "0.171.0")
"""Releases whose rollouts other projects published (docs/rollout.md, "Rollouts of other Codex
releases"): only the scenarios that show what differs on them are recorded with them."""
ALL_VERSIONS = VERSIONS + OTHER_VERSIONS
MAX_STRING = 240
TURN_TIMEOUT = 120.0


@dataclass(frozen=True)
class Scenario:
    """Prompts (one per turn; later turns resume the thread) and the model's script."""

    prompts: Sequence[str]
    script: Sequence[TurnScript]
    description: str
    extra_config: dict[str, Any] = field(default_factory=dict)
    driver: str = "exec"
    """``exec`` (``codex exec --json``, later turns by ``exec resume``) or ``app-server``
    (one ``codex app-server`` process, ``turn/start`` with ``clientUserMessageId``)."""
    versions: tuple[str, ...] = VERSIONS
    interrupt_after: float | None = None
    """Interrupt each turn this many seconds after it started: app-server ``turn/interrupt``;
    exec: SIGINT (what Ctrl-C does)."""
    kill_first_turn_after: float | None = None
    """exec: SIGKILL the first turn's process group this many seconds after it started (Codex
    gets no chance to record the turn's end); the later turns resume the thread."""
    actions: Sequence[tuple[str, str]] = ()
    """app-server: instead of one ``turn/start`` per prompt, these steps in order: ``("turn",
    text)``, ``("plan_turn", text)`` (a turn in plan mode), ``("fork", "")`` (``thread/fork``;
    later steps act on the fork, whose rollout becomes the fixture), ``("compact", "")``
    (``thread/compact/start``), ``("shell", command)`` (``thread/shellCommand``: a user's
    ``!command``), ``("review", instructions)`` (``review/start`` with a custom target),
    ``("name", name)`` (``thread/name/set``), ``("goal", objective)`` (``thread/goal/set``),
    ``("revert", "")`` (``thread/revert`` before the last turn), ``("file", "name:base64")`` (a
    file written into the workspace)."""
    dynamic_tools: Sequence[dict[str, Any]] = ()
    """app-server: ``dynamicTools`` of ``thread/start`` (experimental API); each ``item/tool/call``
    request Codex sends for one is answered with ``{"success": true}`` and a text naming the call."""


PIXEL_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
"""A 1x1 PNG, for view_image and the generated image's result."""
IMAGE_CALL = {
    "type": "image_generation_call",
    "id": "ig_fixture1",
    "status": "completed",
    "revised_prompt": "A single red pixel on a white background",
    "result": PIXEL_PNG,
}
TOOL_SEARCH_CALL = {
    "type": "tool_search_call",
    "call_id": "ts_fixture1",
    "status": "completed",
    "execution": "client",
    "arguments": {"query": "lookup a record", "limit": 5},
}

SCENARIOS: dict[str, Scenario] = {
    "single_reply": Scenario(
        ["say hello"],
        [(Reasoning("The user wants a greeting."), Reply("Hello there!"))],
        "one turn: a reasoning summary and a text reply",
    ),
    "multi_turn": Scenario(
        ["first question", "second question"],
        [Reply("first answer"), (Reply("second answer, part one"), Reply("part two"))],
        "two turns (the second by `exec resume`), the second with two messages",
    ),
    "mcp_tool": Scenario(
        ["echo ping please"],
        [(Reply("Calling the tool."), CallTool("echo.echo", {"text": "ping"})), Reply("The tool said: echo: ping")],
        "an MCP tool call and its result, then a reply",
    ),
    "mcp_tool_error": Scenario(
        ["make it fail"],
        [CallTool("echo.fail", {"reason": "broken on purpose"}), Reply("The tool failed.")],
        "an MCP tool call whose result is an error",
    ),
    "shell_command": Scenario(
        ["run echo"],
        [RunCommand("echo hi-from-shell"), Reply("Ran it.")],
        "a shell command call (exec_command on 0.169, shell on 0.47) and its output",
    ),
    "http_401": Scenario(["hi"], [HttpError(401, "Incorrect API key provided")], "the model endpoint answers 401"),
    "http_429": Scenario(["hi"], [HttpError(429, "Rate limit reached for requests")], "the model endpoint answers 429"),
    "response_failed": Scenario(
        ["hi"],
        [(Reply("partial"), ErrorEvent("The model had an internal error"))],
        "the stream ends with response.failed",
    ),
    "error_then_resume": Scenario(
        ["hi", "try again"],
        [HttpError(500, "upstream broke"), Reply("works now")],
        "a failed turn (HTTP 500), then a resumed turn that succeeds",
    ),
    "app_server_two_turns": Scenario(
        ["first via app-server", "second via app-server"],
        [Reply("app answer one"), Reply("app answer two")],
        "two turns through `codex app-server` with clientUserMessageId thought-1 / thought-2 (recorded as client_id)",
        driver="app-server",
        versions=("0.169.0",),
    ),
    "app_server_interrupt": Scenario(
        ["start something long"],
        [(Reply("working on it"), Stall(5), Reply("never"))],
        "a turn interrupted by app-server turn/interrupt while the model stalls",
        driver="app-server",
        versions=("0.169.0",),
        interrupt_after=1.0,
    ),
    # -- other releases (docs/rollout.md, "Rollouts of other Codex releases") --------------------
    "failed_command": Scenario(
        ["run a failing command"],
        [(Reasoning("Run it."), RunCommand("echo about to fail; exit 3")), Reply("It failed with exit code 3.")],
        "a shell command exiting 3: 0.118 heads its output with `Command: …`; "
        "0.118 also leaves `turn_id` out of agent_message events",
        versions=("0.118.0",),
    ),
    "code_mode_failure": Scenario(
        ["run a failing script"],
        [
            OutputItem(
                {
                    "type": "custom_tool_call",
                    "call_id": "call_cm1",
                    "name": "exec",
                    "input": 'throw new Error("boom from the script");',
                    "status": "completed",
                }
            ),
            Reply("The script failed."),
        ],
        "code mode (features.code_mode): the model's `exec` script throws, the result begins `Script failed`",
        extra_config={"features": {"code_mode": True}},
        versions=("0.147.0",),
    ),
    "code_mode_mcp": Scenario(
        ["use the tool from a script"],
        [
            OutputItem(
                {
                    "type": "custom_tool_call",
                    "call_id": "call_cm2",
                    "name": "exec",
                    "input": 'const r = await tools.mcp__echo__echo({text: "from code mode"});\ntext(r);',
                    "status": "completed",
                }
            ),
            Reply("The tool ran."),
        ],
        "code mode: an `exec` script calls an MCP tool, recorded only as an mcp_tool_call_end event",
        extra_config={"features": {"code_mode": True}},
        versions=("0.147.0",),
    ),
    "turn_never_ends": Scenario(
        ["start a long command", "are you there?"],
        [RunCommand("sleep 25"), Reply("Yes, a new turn.")],
        "Codex killed (SIGKILL) while a command runs, the thread resumed by the "
        "next turn: the first turn has no end and its call no result",
        versions=("0.104.0",),
        kill_first_turn_after=4.0,
    ),
    "reasoning_then_reply": Scenario(
        ["think first"],
        [(Reasoning("Thinking about it.", chunk_size=4), Stall(0.5), Reply("Thought about it.", delay=0.05))],
        "a reasoning summary, a pause, a reply streamed slowly, on 0.58 (the backward stamps seen in "
        "published 0.58 files did not occur offline)",
        versions=("0.58.0",),
    ),
    "old_format": Scenario(
        ["hello old codex"],
        [Reply("hello from the old format")],
        "0.20 writes rollouts without the type/payload envelope",
        versions=("0.20.0",),
    ),
    "forked_thread": Scenario(
        [],
        [Reply("parent answer"), Reply("fork answer")],
        "a thread answered once, forked by app-server thread/fork, then the fork "
        "answers its own turn: its rollout embeds the parent's history",
        driver="app-server",
        versions=("0.135.0",),
        actions=(("turn", "parent question"), ("fork", ""), ("turn", "fork question")),
    ),
    "web_search": Scenario(
        [],
        [
            (
                OutputItem(
                    {
                        "type": "web_search_call",
                        "status": "completed",
                        "action": {"type": "search", "query": "coven codex rollout"},
                    }
                ),
                OutputItem(
                    {
                        "type": "web_search_call",
                        "status": "completed",
                        "action": {"type": "open_page", "url": "https://example.com/rollout"},
                    }
                ),
                Reply("Searched and read a page."),
            )
        ],
        "the model searches the web and opens a page (web_search_call items), then replies",
        driver="app-server",
        versions=("0.135.0",),
        actions=(("turn", "search the web"),),
    ),
    "user_shell": Scenario(
        [],
        [Reply("after the shell command")],
        "a user's `!command` (app-server thread/shellCommand), then a turn",
        driver="app-server",
        versions=("0.135.0",),
        actions=(("shell", "echo from-the-user"), ("turn", "and now?")),
    ),
    "compaction": Scenario(
        [],
        [Reply("first answer"), Reply("SUMMARY: the user asked one question."), Reply("after compaction")],
        "a turn, a compaction (app-server thread/compact/start), a turn",
        driver="app-server",
        versions=("0.135.0",),
        actions=(("turn", "first question"), ("compact", ""), ("turn", "second question")),
    ),
    "review": Scenario(
        [],
        [
            Reply(
                json.dumps(
                    {
                        "findings": [
                            {
                                "title": "Off-by-one in the loop",
                                "body": "The loop stops one item early.",
                                "confidence_score": 0.9,
                                "priority": 1,
                                "code_location": {
                                    "absolute_file_path": "/workspace/a.py",
                                    "line_range": {"start": 1, "end": 2},
                                },
                            }
                        ],
                        "overall_correctness": "patch is incorrect",
                        "overall_explanation": "One bug found.",
                        "overall_confidence_score": 0.8,
                    }
                )
            )
        ],
        "review mode (app-server review/start with custom instructions): the findings",
        driver="app-server",
        versions=("0.135.0", "0.171.0"),
        actions=(("review", "review the loop"),),
    ),
    "plan_mode": Scenario(
        [],
        [Reply("Here is my plan.\n\n<proposed_plan>\n# Plan\n\n1. Read the code.\n2. Fix the bug.\n</proposed_plan>")],
        "a turn in plan mode (turn/start collaborationMode plan): the model proposes a plan",
        driver="app-server",
        versions=("0.135.0",),
        actions=(("plan_turn", "make a plan"),),
    ),
    "newer_items": Scenario(
        [],
        [
            (OutputItem(IMAGE_CALL), Reply("Here is the image.")),
            CallTool("view_image", {"path": "pixel.png"}),
            Reply("It is one pixel."),
            OutputItem(TOOL_SEARCH_CALL),
            CallTool("lookup", {"id": 7}),
            Reply("The lookup answered."),
            CallTool("create_goal", {"objective": "Ship the fixture"}),
            Reply("Goal set."),
        ],
        "what newer releases write: a thread name and goal (thread/name/set, thread/goal/set), an image "
        "generation result, a view_image call, a tool search (a deferred dynamic tool) and the dynamic "
        "tool's call, then thread/revert of the last turn",
        driver="app-server",
        versions=("0.171.0",),
        actions=(
            ("turn", "draw a pixel"),
            ("name", "Fixture thread"),
            ("file", f"pixel.png:{PIXEL_PNG}"),
            ("turn", "look at pixel.png"),
            ("turn", "look the tool up"),
            ("turn", "set a goal"),
            ("goal", "Ship the fixture, really"),
            ("revert", ""),
        ),
        dynamic_tools=(
            {
                "type": "function",
                "name": "lookup",
                "description": "Look a record up by id.",
                "inputSchema": {"type": "object", "properties": {"id": {"type": "integer"}}},
            },
        ),
    ),
    "exec_sigint": Scenario(
        ["start something long"],
        [(Reply("working on it"), Stall(5), Reply("never"))],
        "codex exec interrupted by SIGINT while the model stalls",
        interrupt_after=1.5,
    ),
}


def codex_path(version: str) -> Path:
    path = ROOT / ".codex-cli" / version / "node_modules" / ".bin" / "codex"
    if not path.exists():
        subprocess.run([str(ROOT / "scripts" / "install-codex.sh"), version], check=True, stdout=subprocess.DEVNULL)
    return path


async def run_turn(
    codex: Path,
    args: list[str],
    prompt: str,
    *,
    cwd: Path,
    env: dict[str, str],
    interrupt_after: float | None = None,
    kill_after: float | None = None,
) -> tuple[int, list[str]]:
    """Run one ``codex exec`` turn; the prompt goes on stdin (``-``)."""
    proc = await asyncio.create_subprocess_exec(
        str(codex),
        "exec",
        "--json",
        "--skip-git-repo-check",
        *args,
        "-",
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )

    async def interrupt() -> None:
        if interrupt_after is not None:
            await asyncio.sleep(interrupt_after)
            if proc.returncode is None:
                proc.send_signal(signal.SIGINT)
        if kill_after is not None:
            await asyncio.sleep(kill_after)
            if proc.returncode is None:
                os.killpg(proc.pid, signal.SIGKILL)  # the node wrapper, the native binary and the command

    try:
        async with asyncio.timeout(TURN_TIMEOUT):
            (stdout, stderr), _ = await asyncio.gather(proc.communicate(prompt.encode()), interrupt())
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    lines = stdout.decode().splitlines()
    if stderr.strip():
        lines.append(json.dumps({"stderr": stderr.decode()[-2000:]}))
    return proc.returncode if proc.returncode is not None else -1, lines


class AppServer:
    """A minimal JSON-RPC client for ``codex app-server`` (newline-delimited JSON on stdio)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.next_id = 0
        self.transcript: list[str] = []

    async def send(self, method: str, params: dict[str, Any] | None = None, *, notify: bool = False) -> int:
        message: dict[str, Any] = {"method": method}
        if params is not None:
            message["params"] = params
        if not notify:
            self.next_id += 1
            message["id"] = self.next_id
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        await self.proc.stdin.drain()
        return self.next_id

    async def answer(self, request_id: Any, result: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps({"id": request_id, "result": result}) + "\n").encode())
        await self.proc.stdin.drain()

    async def until(self, done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        assert self.proc.stdout is not None
        async with asyncio.timeout(TURN_TIMEOUT):
            while True:
                raw = await self.proc.stdout.readline()
                if not raw:
                    raise RuntimeError("codex app-server closed its output")
                message = json.loads(raw)
                if not str(message.get("method", "")).endswith("/delta"):
                    self.transcript.append(raw.decode().rstrip("\n"))
                if message.get("method") == "item/tool/call" and "id" in message:  # a dynamic tool's call
                    params = message.get("params") or {}
                    text = f"dynamic tool {params.get('tool')} called with {json.dumps(params.get('arguments'))}"
                    answer = {"success": True, "contentItems": [{"type": "inputText", "text": text}]}
                    await self.answer(message["id"], answer)
                if done(message):
                    return dict(message)


async def run_app_server(
    codex: Path,
    prompts: Sequence[str],
    *,
    cwd: Path,
    env: dict[str, str],
    interrupt_after: float | None = None,
    actions: Sequence[tuple[str, str]] = (),
    dynamic_tools: Sequence[dict[str, Any]] = (),
) -> tuple[str, list[str]]:
    proc = await asyncio.create_subprocess_exec(
        str(codex),
        "app-server",
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    client = AppServer(proc)
    try:
        hello: dict[str, Any] = {"clientInfo": {"name": "coven-fixtures", "version": "1"}}
        if dynamic_tools or any(action == "plan_turn" for action, _ in actions):  # experimental fields
            hello["capabilities"] = {"experimentalApi": True}
        request = await client.send("initialize", hello)
        await client.until(lambda m: m.get("id") == request)
        await client.send("initialized", notify=True)
        start: dict[str, Any] = {"cwd": str(cwd)}
        if dynamic_tools:
            start["dynamicTools"] = list(dynamic_tools)
        request = await client.send("thread/start", start)
        started = await client.until(lambda m: m.get("id") == request)
        if "error" in started:
            raise RuntimeError(f"thread/start: {started['error']}")
        thread_id = str(started["result"]["thread"]["id"])
        steps = list(actions) or [("turn", prompt) for prompt in prompts]
        number = 0
        last_turn: str | None = None
        for action, argument in steps:
            if action == "file":
                name, _, data = argument.partition(":")
                (cwd / name).write_bytes(base64.b64decode(data))
                continue
            if action in ("name", "goal", "revert"):
                method, params_of = {
                    "name": ("thread/name/set", {"threadId": thread_id, "name": argument}),
                    "goal": ("thread/goal/set", {"threadId": thread_id, "objective": argument}),
                    "revert": ("thread/revert", {"threadId": thread_id, "beforeTurnId": last_turn}),
                }[action]
                request = await client.send(method, params_of)
                reply = await client.until(lambda m, request=request: m.get("id") == request)
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                continue
            if action == "fork":
                request = await client.send("thread/fork", {"threadId": thread_id})
                forked = await client.until(lambda m, request=request: m.get("id") == request)
                thread_id = str(forked["result"]["thread"]["id"])
                continue
            if action == "compact":
                request = await client.send("thread/compact/start", {"threadId": thread_id})
                await client.until(lambda m, request=request: m.get("id") == request)
                await client.until(lambda m: m.get("method") == "turn/completed")
                continue
            if action == "shell":
                request = await client.send("thread/shellCommand", {"threadId": thread_id, "command": argument})
                await client.until(lambda m, request=request: m.get("id") == request)
                await client.until(lambda m: m.get("method") == "turn/completed")
                continue
            if action == "review":
                request = await client.send(
                    "review/start", {"threadId": thread_id, "target": {"type": "custom", "instructions": argument}}
                )
                await client.until(lambda m, request=request: m.get("id") == request)
                await client.until(lambda m: m.get("method") == "turn/completed")
                continue
            if action not in ("turn", "plan_turn"):
                raise ValueError(f"unknown app-server action {action!r}")
            number += 1
            params: dict[str, Any] = {
                "threadId": thread_id,
                "clientUserMessageId": f"thought-{number}",
                "input": [{"type": "text", "text": argument}],
            }
            if action == "plan_turn":
                params["collaborationMode"] = {"mode": "plan", "settings": {"model": "m"}}
            request = await client.send("turn/start", params)
            turn = await client.until(lambda m, request=request: m.get("id") == request)
            last_turn = str(turn["result"]["turn"]["id"])
            if interrupt_after is not None:
                await asyncio.sleep(interrupt_after)
                await client.send("turn/interrupt", {"threadId": thread_id, "turnId": turn["result"]["turn"]["id"]})
            await client.until(lambda m: m.get("method") == "turn/completed")
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            async with asyncio.timeout(10):
                await proc.wait()
        except TimeoutError:
            proc.kill()
            await proc.wait()
    return thread_id, client.transcript


def thread_id_of(exec_lines: list[str], *, required: bool) -> str | None:
    """The thread id ``codex exec --json`` reported (old releases such as 0.20 report none)."""
    for line in exec_lines:
        if line.startswith("{") and '"thread.started"' in line:
            return str(json.loads(line)["thread_id"])
    if required:
        raise RuntimeError(f"codex exec did not report a thread id: {exec_lines[:5]}")
    return None


class Sanitizer:
    def __init__(self, replacements: dict[str, str]) -> None:
        # Longest first so that a path is not half-replaced by its prefix.
        self._pairs = sorted(replacements.items(), key=lambda pair: -len(pair[0]))

    def text(self, value: str) -> str:
        for old, new in self._pairs:
            value = value.replace(old, new)
        return value

    def value(self, value: Any) -> Any:
        if isinstance(value, str):
            value = self.text(value)
            if len(value) > MAX_STRING:
                return value[:MAX_STRING] + f"…[cut {len(value) - MAX_STRING} chars]"
            return value
        if isinstance(value, list):
            return [self.value(item) for item in value]
        if isinstance(value, dict):
            return {key: self.value(item) for key, item in value.items()}
        return value

    def line(self, line: str) -> str:
        try:
            data = json.loads(line)
        except ValueError:
            return self.text(line)
        return json.dumps(self.value(data), ensure_ascii=False, separators=(",", ":"))


async def generate(version: str, name: str, scenario: Scenario) -> None:
    codex = codex_path(version)
    root = Path(tempfile.mkdtemp(prefix="coven-fixture-"))
    try:
        workspace, home = root / "workspace", root / "codex-home"
        workspace.mkdir()
        (root / "home").mkdir()
        async with ScriptedModelServer(scenario.script) as server:
            env = {
                **os.environ,
                "HOME": str(root / "home"),  # commands run without the recording machine's shell profile
                **write_codex_config(
                    home, server.base_url, mcp_servers={"echo": mcp_server_entry()}, extra=scenario.extra_config
                ),
            }
            exec_lines: list[str] = []
            thread_id: str | None = None
            if scenario.driver == "app-server":
                thread_id, exec_lines = await run_app_server(
                    codex,
                    scenario.prompts,
                    cwd=workspace,
                    env=env,
                    interrupt_after=scenario.interrupt_after,
                    actions=scenario.actions,
                    dynamic_tools=scenario.dynamic_tools,
                )
            for turn, prompt in enumerate(scenario.prompts if scenario.driver == "exec" else (), start=1):
                args = ["resume", thread_id] if thread_id else []
                kill_after = scenario.kill_first_turn_after if turn == 1 else None
                code, lines = await run_turn(
                    codex,
                    args,
                    prompt,
                    cwd=workspace,
                    env=env,
                    interrupt_after=scenario.interrupt_after,
                    kill_after=kill_after,
                )
                exec_lines.append(json.dumps({"turn": turn, "exit_code": code}))
                exec_lines.extend(lines)
                thread_id = thread_id or thread_id_of(lines, required=turn < len(scenario.prompts))
        rollouts = sorted(home.glob("sessions/*/*/*/rollout-*.jsonl"))
        if len(rollouts) > 1 and thread_id is not None:  # a fork: the fixture is the last thread's file
            rollouts = [path for path in rollouts if path.name.endswith(f"-{thread_id}.jsonl")]
        if len(rollouts) != 1:
            raise RuntimeError(f"{version} {name}: expected one rollout file, found {rollouts}")
        sanitizer = Sanitizer(
            {
                str(workspace): "/workspace",
                str(home): "/codex-home",
                str(root): "/tmp-root",
                sys.executable: "/python",
                str(ROOT): "/repo",
                f"{Path.home()}/": "/home/user/",
            }
        )
        target = FIXTURES / version
        target.mkdir(parents=True, exist_ok=True)
        rollout_lines = rollouts[0].read_text(encoding="utf-8").splitlines()
        (target / f"{name}.jsonl").write_text(
            "".join(sanitizer.line(x) + "\n" for x in rollout_lines), encoding="utf-8"
        )
        (target / f"{name}.exec.jsonl").write_text(
            "".join(sanitizer.line(x) + "\n" for x in exec_lines), encoding="utf-8"
        )
        print(f"{version:8} {name:18} {len(rollout_lines):3} rollout lines  thread {thread_id}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def write_index(versions: Sequence[str]) -> None:
    index = {
        name: {
            "prompts": list(s.prompts) or [text for action, text in s.actions if action == "turn"],
            "description": s.description,
            "driver": s.driver,
            "versions": list(s.versions),
        }
        for name, s in SCENARIOS.items()
    }
    (FIXTURES / "scenarios.json").write_text(
        json.dumps({"versions": list(versions), "scenarios": index}, indent=2) + "\n", encoding="utf-8"
    )


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="append", choices=ALL_VERSIONS, help="only this Codex version")
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS), help="only this scenario")
    args = parser.parse_args(argv)
    versions = args.version or list(ALL_VERSIONS)
    for version in versions:
        for name in args.scenario or list(SCENARIOS):
            if version in SCENARIOS[name].versions:
                await generate(version, name, SCENARIOS[name])
    write_index(ALL_VERSIONS)
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
