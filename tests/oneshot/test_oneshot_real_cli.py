"""``coven-codex exec`` end to end with the real Codex CLIs (both versions) and the scripted model:
AGENTS.md from a template reaches the model, Codex's arguments arrive unchanged, the exit code is
Codex's, the output-file retry resumes the same thread and stops at its limit, ``~/.codex`` is
untouched, and ``--collect-traces`` captures Codex's own OpenTelemetry records for the run."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import tomlkit

from coven_codex.codex.version import detect_version
from coven_codex.oneshot.run import RETRY_MESSAGE
from coven_codex.testing import (
    EXHAUSTED_TEXT,
    HttpError,
    RecordedRequest,
    Reply,
    ScriptedModelServer,
    Stall,
    codex_config,
)
from coven_codex.testing.codex_config import DEFAULT_ENV_KEY
from coven_codex.testing.processes import codex_processes
from coven_codex.testing.steps import TurnScript
from coven_codex.traces.records import TraceRecord

pytestmark = pytest.mark.codex

AUTH = '{"OPENAI_API_KEY": "sk-not-used-by-the-scripted-provider"}\n'


@dataclass
class Done:
    code: int
    stdout: str
    stderr: str


def digest(root: Path) -> str:
    hashed = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        hashed.update(str(path.relative_to(root)).encode())
        if path.is_file():
            hashed.update(path.read_bytes())
    return hashed.hexdigest()


def user_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    (home / ".codex" / "auth.json").write_text(AUTH)
    (home / ".codex" / "config.toml").write_text('model = "the-users-own"\n')
    return home


def base_config(tmp_path: Path, server: ScriptedModelServer) -> Path:
    path = tmp_path / "base.toml"
    config = codex_config(server.base_url)
    config.pop("approval_policy")
    path.write_text("# the user's base config\n" + tomlkit.dumps(config))
    return path


async def coven_exec(tmp_path: Path, codex_bin: Path, base: Path, *args: str) -> Done:
    """``coven-codex exec --workspace W --codex-config BASE ARGS`` in ``tmp_path``, as the user at ``tmp_path/home``."""
    env = {**os.environ, "HOME": str(user_home(tmp_path)), DEFAULT_ENV_KEY: "scripted"}
    env.pop("CODEX_HOME", None)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "coven_codex",
        "exec",
        "--codex-path",
        str(codex_bin),
        "--workspace",
        "W",
        "--codex-config",
        str(base),
        *args,
        env=env,
        cwd=tmp_path,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 240)
    assert process.returncode is not None
    return Done(process.returncode, out.decode(), err.decode())


def thread_ids(stdout: str) -> list[str]:
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return [event["thread_id"] for event in events if event.get("type") == "thread.started"]


def retry_text() -> str:
    return RETRY_MESSAGE.format(path="agent_output.json")


async def test_template_and_arguments_reach_the_model_and_the_users_codex_dir_is_untouched(
    tmp_path: Path, codex_bin: Path
) -> None:
    template = tmp_path / "agents.md"
    template.write_text("Team $TEAM works in $WORKSPACE_DIR; the formula $L$ stays as it is.\n")
    prompt = "a prompt with --json and -C /elsewhere inside"
    async with ScriptedModelServer([Reply("done")]) as server:
        base = base_config(tmp_path, server)
        before = digest(user_home(tmp_path) / ".codex")
        (tmp_path / "W").mkdir()
        (tmp_path / "W" / "agent_output.json").write_text("{}")  # already there: no retry
        done = await coven_exec(
            tmp_path,
            codex_bin,
            base,
            "--prompt-file",
            str(template),
            "-V",
            "TEAM=blue",
            "--",
            "exec",
            "-m",
            "passed-through-model",
            prompt,
        )
        assert done.code == 0, done.stderr
        (request,) = server.requests.responses_requests()
    workspace = (tmp_path / "W").resolve()
    sent = json.dumps(request.json)
    assert f"Team blue works in {workspace}; the formula $L$ stays as it is." in sent
    assert request.json["model"] == "passed-through-model"
    assert request.user_texts()[-1] == prompt
    assert digest(tmp_path / "home" / ".codex") == before
    assert (workspace / ".codex-home" / "auth.json").read_text() == AUTH
    assert len(thread_ids(done.stdout)) == 1  # Codex's own --json events, passed through


async def test_codex_exit_code_is_the_commands_exit_code(tmp_path: Path, codex_bin: Path) -> None:
    async with ScriptedModelServer([HttpError(400, "no such thing")]) as server:
        base = base_config(tmp_path, server)
        done = await coven_exec(
            tmp_path,
            codex_bin,
            base,
            "--max-retries",
            "0",
            "--",
            "exec",
            "hi",
        )
    assert done.code == 1, done.stderr
    assert done.stderr.count("agent_output.json is still missing") == 1


async def test_the_retry_resumes_the_same_thread_and_stops_at_the_limit(tmp_path: Path, codex_bin: Path) -> None:
    async with ScriptedModelServer([Reply("the first answer")]) as server:
        base = base_config(tmp_path, server)
        done = await coven_exec(
            tmp_path,
            codex_bin,
            base,
            "--max-retries",
            "2",
            "--",
            "exec",
            "go",
        )
        requests = server.requests.responses_requests()
    assert done.code == 0, done.stderr
    assert len(requests) == 3  # the run and two resumes, then the limit
    ids = thread_ids(done.stdout)
    assert len(ids) == 3 and len(set(ids)) == 1
    for resumed in requests[1:]:
        history = json.dumps(resumed.input_items())
        assert "the first answer" in history  # the model sees the thread so far
        assert resumed.user_texts()[0] == "go" and resumed.user_texts()[-1] == retry_text()
    assert EXHAUSTED_TEXT in json.dumps(requests[2].input_items())
    assert done.stderr.count("still missing after Codex exited with 0 and 2 resume(s)") == 1


async def test_the_retry_stops_as_soon_as_the_file_exists(tmp_path: Path, codex_bin: Path) -> None:
    workspace = tmp_path / "W"

    def writes_the_file(request: RecordedRequest) -> TurnScript:
        if request.user_texts()[-1] == retry_text():
            (workspace / "agent_output.json").write_text('{"answer": 42}')
        return Reply("written")

    async with ScriptedModelServer([Reply("forgot the file")], responder=writes_the_file) as server:
        base = base_config(tmp_path, server)
        done = await coven_exec(tmp_path, codex_bin, base, "--", "exec", "go")
        assert len(server.requests.responses_requests()) == 2
    assert done.code == 0, done.stderr
    assert "still missing" not in done.stderr


async def test_collected_traces_are_codex_records_of_this_run(tmp_path: Path, codex_bin: Path) -> None:
    version = detect_version(codex_bin)
    async with ScriptedModelServer([Reply("traced")]) as server:
        base = base_config(tmp_path, server)
        (tmp_path / "W").mkdir()
        (tmp_path / "W" / "agent_output.json").write_text("{}")
        done = await coven_exec(tmp_path, codex_bin, base, "--collect-traces", "--", "exec", "hi")
    assert done.code == 0, done.stderr
    traces = tmp_path / "W" / "traces"
    lines = (traces / "traces.jsonl").read_text().splitlines()
    records = [TraceRecord.model_validate(json.loads(line)) for line in lines]
    signals = {record.signal for record in records}
    assert signals == ({"logs", "traces"} if version.supports_otel_traces else {"logs"})
    (thread,) = thread_ids(done.stdout)
    conversation_ids = set()
    events = set()
    for record in records:
        if record.signal != "logs":
            continue
        for resource in record.payload["resourceLogs"]:  # type: ignore[union-attr]
            attributes = {a["key"]: a["value"] for a in resource["resource"]["attributes"]}  # type: ignore[index]
            assert attributes["service.name"] == {"stringValue": "codex_exec"}
            for scope in resource["scopeLogs"]:  # type: ignore[index]
                for log_record in scope["logRecords"]:  # type: ignore[index]
                    fields = {a["key"]: a["value"].get("stringValue") for a in log_record["attributes"]}  # type: ignore[index]
                    events.add(fields.get("event.name"))
                    if "conversation.id" in fields:
                        conversation_ids.add(fields["conversation.id"])
    assert conversation_ids == {thread}
    assert "codex.conversation_starts" in events
    log_text = (traces / "stdout.log").read_text()
    assert all(line in log_text for line in done.stdout.splitlines())
    if not version.supports_otel_traces:
        assert done.stderr.count("exports only log records") == 1
    # Codex sent the receiver's secret header with every export (the config's exporter headers)
    assert "the OTLP receiver refused" not in done.stderr
    assert {(traces / name).stat().st_mode & 0o777 for name in ("traces.jsonl", "stdout.log")} == {0o600}


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
async def test_a_signal_ends_codex_and_the_command(tmp_path: Path, codex_bin_169: Path, signum: int, code: int) -> None:
    async with ScriptedModelServer([Stall(120)]) as server:
        base = base_config(tmp_path, server)
        env = {**os.environ, "HOME": str(user_home(tmp_path)), DEFAULT_ENV_KEY: "scripted"}
        env.pop("CODEX_HOME", None)
        process = await asyncio.create_subprocess_exec(
            *[sys.executable, "-m", "coven_codex", "exec", "--codex-path", str(codex_bin_169)],
            *["--workspace", "W", "--codex-config", str(base), "--collect-traces", "--", "exec", "wait"],
            env=env,
            cwd=tmp_path,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        await asyncio.wait_for(server.requests.wait_for(1), 60)  # Codex is in its turn
        home = (tmp_path / "W" / ".codex-home").resolve()
        assert codex_processes(home)
        process.send_signal(signum)
        assert await asyncio.wait_for(process.wait(), 60) == code
    assert codex_processes(home) == []
    # started afresh before Codex, whatever Codex managed to export before it was ended
    assert (tmp_path / "W" / "traces" / "traces.jsonl").exists()


async def test_outside_exec_mode_arguments_pass_untouched_and_there_is_no_retry(
    tmp_path: Path, codex_bin: Path
) -> None:
    async with ScriptedModelServer([]) as server:
        base = base_config(tmp_path, server)
        done = await coven_exec(tmp_path, codex_bin, base, "--max-retries", "3", "--", "--version")
        assert server.requests.responses_requests() == []
    assert done.code == 0, done.stderr
    assert detect_version(codex_bin).raw in done.stdout  # Codex's own output, on the command's stdout
    assert "still missing" not in done.stderr
    assert (tmp_path / "W" / ".codex-home" / "config.toml").exists()  # the workspace was prepared all the same
