"""The real Codex CLI (both pinned versions) against the scripted model server, with the
rollout tailed *while the turn runs* and translated into chat entries."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rollout_helpers import summary

from coven_codex.codex.process import spawn, terminate_tree
from coven_codex.entries import BaseEntry, ErrorEntry, ResponseEntry, StatusEntry, ToolResultEntry
from coven_codex.rollout import RolloutTranslator, error_entry_from_message, locate_rollout
from coven_codex.tailing import tail_lines
from coven_codex.testing import (
    CallTool,
    HttpError,
    Reply,
    ScriptedModelServer,
    Stall,
    TurnScript,
    write_codex_config,
)
from coven_codex.testing.mcp_echo_server import mcp_server_entry

pytestmark = pytest.mark.codex

TURN_TIMEOUT = 90.0


@dataclass
class Turn:
    exit_code: int
    exec_messages: list[dict[str, object]]
    exited_at: float


@dataclass
class LiveSession:
    """Runs Codex turns in one thread while a tailer translates its rollout as it grows."""

    codex: Path
    home: Path
    workspace: Path
    env: dict[str, str]
    thread_id: str | None = None
    entries: list[tuple[float, BaseEntry]] = field(default_factory=list)
    _consumed: int = 0
    _progress: asyncio.Event = field(default_factory=asyncio.Event)
    _tail_task: asyncio.Task[None] | None = None
    _path: Path | None = None

    async def turn(self, prompt: str) -> Turn:
        args = ["resume", self.thread_id] if self.thread_id else []
        # Started as a tree and ended as one (coven_codex.codex.process): Codex's MCP server child
        # outlives `codex exec` for a moment, and must not outlive the test.
        child = await spawn(
            [str(self.codex), "exec", "--json", "--skip-git-repo-check", *args, "-"],
            cwd=self.workspace,
            env=self.env,
            stderr=subprocess.DEVNULL,
        )
        proc = child.process
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(prompt.encode())
        proc.stdin.close()
        messages: list[dict[str, object]] = []
        try:
            async with asyncio.timeout(TURN_TIMEOUT):
                async for raw in proc.stdout:
                    if not raw.startswith(b"{"):
                        continue
                    message = json.loads(raw)
                    messages.append(message)
                    if message.get("type") == "thread.started" and self.thread_id is None:
                        self.thread_id = str(message["thread_id"])
                        self._tail_task = asyncio.create_task(self._tail())
                await child.exited.wait()
                exited_at = time.monotonic()
        finally:
            exit_code = await terminate_tree(child, 1.0, patience=1.0)
        await self._drain()
        return Turn(exit_code, messages, exited_at)

    async def _tail(self) -> None:
        assert self.thread_id is not None
        self._path = await locate_rollout(self.home, thread_id=self.thread_id, cwd=None, timeout=TURN_TIMEOUT)
        translator = RolloutTranslator("conv", self.thread_id)
        async with contextlib.aclosing(tail_lines(self._path)) as lines:
            async for line in lines:
                now = time.monotonic()
                self.entries.extend((now, entry) for entry in translator.feed(line))
                self._consumed = line.end
                self._progress.set()

    async def _drain(self) -> None:
        """Wait until the tailer has consumed everything the finished turn wrote."""
        async with asyncio.timeout(30):
            while self._path is None or self._consumed < self._path.stat().st_size:
                self._progress.clear()
                if self._tail_task is not None and self._tail_task.done():
                    self._tail_task.result()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.5):
                        await self._progress.wait()

    async def aclose(self) -> None:
        if self._tail_task is not None:
            self._tail_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._tail_task

    def all_entries(self) -> list[BaseEntry]:
        return [entry for _, entry in self.entries]


@contextlib.asynccontextmanager
async def live_session(
    codex_bin: Path, tmp_path: Path, script: Sequence[TurnScript]
) -> AsyncIterator[tuple[LiveSession, ScriptedModelServer]]:
    async with ScriptedModelServer(script) as server:
        home, workspace = tmp_path / "codex-home", tmp_path / "workspace"
        workspace.mkdir()
        env = {**os.environ, **write_codex_config(home, server.base_url, mcp_servers={"echo": mcp_server_entry()})}
        session = LiveSession(codex_bin, home, workspace, env)
        try:
            yield session, server
        finally:
            await session.aclose()


def rows(session: LiveSession) -> list[tuple[str, ...]]:
    return summary(session.all_entries())


def is_169(codex_version: str) -> bool:
    return codex_version == "0.169.0"


START = ("status", "turn_started", "turn started")
DONE = ("status", "turn_completed", "turn completed")


async def test_text_reply_is_tailed_while_the_turn_runs(codex_bin: Path, codex_version: str, tmp_path: Path) -> None:
    script = [(Reply("part one"), Stall(1.5), Reply("part two"))]
    async with live_session(codex_bin, tmp_path, script) as (session, server):
        turn = await session.turn("hello codex")
        assert turn.exit_code == 0
        expected = [START, ("response", "", "part one"), ("response", "", "part two")]
        assert rows(session) == ([*expected, DONE] if is_169(codex_version) else expected)
        first_seen = next(t for t, e in session.entries if isinstance(e, ResponseEntry) and e.text == "part one")
        assert first_seen < turn.exited_at - 1.0, "the first reply reached the chat only after Codex exited"
        assert server.requests.turn_prompts() == ["hello codex"]
        assert all(e.id is not None and e.id.startswith(f"{session.thread_id}:") for e in session.all_entries())


async def test_tool_call_and_result(codex_bin: Path, codex_version: str, tmp_path: Path) -> None:
    script: list[TurnScript] = [CallTool("echo.echo", {"text": "ping"}), Reply("the tool said ping")]
    async with live_session(codex_bin, tmp_path, script) as (session, server):
        turn = await session.turn("use the echo tool")
        assert turn.exit_code == 0
        expected = [
            START,
            ("tool_call", "echo.echo", 'echo.echo {"text": "ping"}'),
            ("tool_result", "echo.echo", "echo: ping"),
            ("response", "", "the tool said ping"),
        ]
        assert rows(session) == ([*expected, DONE] if is_169(codex_version) else expected)
        (call_output,) = server.requests.function_call_outputs()
        result = next(e for e in session.all_entries() if isinstance(e, ToolResultEntry))
        assert result.call_id == call_output.call_id and result.is_error is False


async def test_two_turns_in_one_thread(codex_bin: Path, codex_version: str, tmp_path: Path) -> None:
    async with live_session(codex_bin, tmp_path, [Reply("answer one"), Reply("answer two")]) as (session, server):
        assert (await session.turn("question one")).exit_code == 0
        assert (await session.turn("question two")).exit_code == 0
        done = [DONE] if is_169(codex_version) else []
        assert rows(session) == [
            START,
            ("response", "", "answer one"),
            *done,
            START,
            ("response", "", "answer two"),
            *done,
        ]
        assert server.requests.turn_prompts() == ["question one", "question two"]
        turn_ids = {e.turn_id for e in session.all_entries() if isinstance(e, StatusEntry)}
        assert len(turn_ids) == (2 if is_169(codex_version) else 1)  # 0.47 records no turn ids


@pytest.mark.parametrize(("status", "code"), [(401, "AUTH"), (429, "RATE_LIMIT")])
async def test_model_http_errors_surface_as_classified_error_entries(
    codex_bin: Path, codex_version: str, tmp_path: Path, status: int, code: str
) -> None:
    async with live_session(codex_bin, tmp_path, [HttpError(status, "scripted failure")]) as (session, server):
        turn = await session.turn("hi")
        assert len(server.requests.responses_requests()) == 1  # retries are off in the test config
        exec_errors = [str(m["message"]) for m in turn.exec_messages if m.get("type") == "error"]
        if is_169(codex_version):
            # 0.169 writes the failure into the rollout: task_complete carries the error.
            assert [row[:2] for row in rows(session)] == [START[:2], ("error", code), ("status", "turn_failed")]
            error = next(e for e in session.all_entries() if isinstance(e, ErrorEntry))
            assert str(status) in error.text and error.hint
        else:
            # 0.47 writes nothing about it into the rollout; only `exec --json` reports it.
            assert rows(session) == [START]
            assert turn.exit_code == 1 and exec_errors
            entry = error_entry_from_message(exec_errors[-1], conversation="conv", thread_id=session.thread_id)
            assert entry.code == code and str(status) in entry.text


async def test_locator_finds_the_file_in_the_local_time_date_folder(codex_bin: Path, tmp_path: Path) -> None:
    """Codex names date folders in local time: pick a time zone whose date differs from UTC."""
    now = datetime.now(UTC)
    zone, offset = ("Etc/GMT+12", -12) if now.hour < 12 else ("Etc/GMT-14", 14)  # POSIX signs are inverted
    local_day = (now + timedelta(hours=offset)).strftime("%Y/%m/%d")
    assert local_day != now.strftime("%Y/%m/%d")
    async with live_session(codex_bin, tmp_path, [Reply("hello from elsewhere")]) as (session, _server):
        session.env["TZ"] = zone
        assert (await session.turn("hi")).exit_code == 0
        assert session.thread_id is not None
        path = await locate_rollout(session.home, thread_id=session.thread_id, cwd=None, timeout=5)
        assert path.parent.relative_to(session.home / "sessions").as_posix() == local_day
        assert await locate_rollout(session.home, thread_id=None, cwd=session.workspace, timeout=5) == path
        assert [e.text for e in session.all_entries() if isinstance(e, ResponseEntry)] == ["hello from elsewhere"]
