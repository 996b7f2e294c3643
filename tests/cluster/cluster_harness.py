"""Harness for the cluster's end-to-end tests: several daemons (``python -m coven_codex run`` as
real subprocesses, the real Codex CLI), each with its own workspace, state directory and
``CODEX_HOME`` (nothing shared but Redis), one Redis journal, the scripted model server in the
test process."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import tomlkit

from coven_codex.entries import BaseEntry, ThoughtEntry
from coven_codex.journal import START, JournalRecord
from coven_codex.journal.redis import RedisJournal
from coven_codex.testing.codex_config import DEFAULT_ENV_KEY, codex_config
from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.processes import codex_processes
from coven_codex.testing.redis_server import RedisServer
from coven_codex.testing.request_log import RecordedRequest


def user_prompts(request: RecordedRequest) -> list[str]:
    """The texts the user typed, in a model request's history (oldest first)."""
    return request.user_texts()


@dataclass(eq=False)
class Node:
    """One daemon's place: its own workspace, state directory and CODEX_HOME."""

    index: int
    root: Path
    process: asyncio.subprocess.Process | None = None
    runs: int = 0
    logs: list[Path] = field(default_factory=list)

    @property
    def workspace(self) -> Path:
        return self.root / "ws"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def codex_home(self) -> Path:
        return self.root / "codex-home"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    def log(self) -> str:
        return "\n".join(path.read_text(errors="replace") for path in self.logs)


class ClusterHarness:
    """N daemon places on one Redis journal (module docstring)."""

    def __init__(
        self, tmp: Path, codex_bin: Path, server: ScriptedModelServer, redis: RedisServer, *, nodes: int, lease: float
    ) -> None:
        self.tmp = tmp
        self.codex_bin = codex_bin
        self.server = server
        self.redis = redis
        self.lease = lease
        self.journal_name = redis.url(key=f"chat-{uuid.uuid4().hex[:12]}")
        self.journal = RedisJournal.from_url(self.journal_name)
        self._seen: list[BaseEntry] = []
        self._read_to = START
        self.base_config = tmp / "base.toml"
        self.base_config.write_text(tomlkit.dumps(codex_config(server.base_url)))
        self.nodes = [Node(i, tmp / f"daemon-{i}") for i in range(nodes)]
        self.extra_args: list[str] = []
        """More ``run`` arguments for every daemon (e.g. ``--config`` with ``[webhooks]``)."""
        for node in self.nodes:
            node.workspace.mkdir(parents=True)

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in {"CODEX_HOME", "OPENAI_API_KEY"}}
        env[DEFAULT_ENV_KEY] = "scripted-test-key"
        env["PYTHONUNBUFFERED"] = "1"
        return env

    async def start(self, node: Node) -> None:
        assert not node.running
        node.runs += 1
        log_path = node.root / f"run-{node.runs}.log"
        node.logs.append(log_path)
        argv = [
            sys.executable, "-m", "coven_codex", "--log-level", "DEBUG", "run",
            "--workspace", str(node.workspace),
            "--journal", self.journal_name,
            "--state-dir", str(node.state_dir),
            "--codex-home", str(node.codex_home),
            "--codex-config", str(self.base_config),
            "--codex-path", str(self.codex_bin),
            "--kill-grace", "3",
            "--restart-backoff", "0.2",
            "--cluster", "--lease-time", str(self.lease),
            *self.extra_args,
        ]  # fmt: skip
        with log_path.open("wb") as log:
            node.process = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log, env=self.env, cwd=str(node.root)
            )

    async def until_ready(self, node: Node, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while "ready (pid" not in node.logs[-1].read_text(errors="replace"):
            assert node.running, f"daemon {node.index} exited:\n{node.log()[-3000:]}"
            assert time.monotonic() < deadline, f"daemon {node.index} never got ready:\n{node.log()[-3000:]}"
            await asyncio.sleep(0.05)

    async def kill9(self, node: Node) -> None:
        assert node.process is not None
        with contextlib.suppress(ProcessLookupError):
            node.process.kill()
        await node.process.wait()

    async def stop(self, node: Node, timeout: float = 40.0) -> int:
        assert node.process is not None
        if node.process.returncode is None:
            node.process.send_signal(signal.SIGCONT)
            node.process.send_signal(signal.SIGTERM)
        try:
            return await asyncio.wait_for(node.process.wait(), timeout)
        except TimeoutError:
            node.process.kill()
            await node.process.wait()
            raise AssertionError(f"daemon {node.index} did not stop in {timeout}s:\n{node.log()[-3000:]}") from None

    def signal(self, node: Node, sig: signal.Signals) -> None:
        assert node.process is not None
        node.process.send_signal(sig)

    async def think(self, conversation: str, text: str) -> JournalRecord:
        return await self.journal.append(ThoughtEntry(conversation=conversation, text=text))

    async def entries(self) -> list[BaseEntry]:
        """Every entry of the stream, read on from where the last look ended (a stream is only
        appended to; the tests wait by looking often, and reading it whole each time took a core)."""
        items = await self.journal.read(self._read_to)
        self._seen.extend(item.entry for item in items if isinstance(item, JournalRecord))
        if items:
            self._read_to = items[-1].end
        return list(self._seen)

    async def wait_for(
        self,
        predicate: Callable[[list[BaseEntry]], bool],
        *,
        timeout: float,
        what: str,
        while_progressing: bool = False,
    ) -> list[BaseEntry]:
        deadline = time.monotonic() + timeout
        seen = -1
        while True:
            entries = await self.entries()
            if predicate(entries):
                return entries
            if while_progressing and len(entries) > seen:
                seen = len(entries)
                deadline = time.monotonic() + timeout
            if time.monotonic() > deadline:
                tail = "\n".join(
                    f"  {e.conversation} {e.kind} {getattr(e, 'state', '')} {e.text[:80]!r}" for e in entries[-30:]
                )
                logs = "\n".join(f"--- daemon {n.index}\n{n.log()[-3000:]}" for n in self.nodes)
                raise AssertionError(f"timed out waiting for {what}; journal tail:\n{tail}\n{logs}")
            await asyncio.sleep(0.1)

    async def cleanup(self) -> list[str]:
        """Kill what still runs; the Codex processes left behind (described)."""
        for node in self.nodes:
            if node.running:
                assert node.process is not None
                node.process.send_signal(signal.SIGCONT)
                node.process.kill()
                await node.process.wait()
        await self.journal.aclose()
        left: list[str] = []
        deadline = time.monotonic() + 10
        for node in self.nodes:
            procs = codex_processes(node.codex_home)
            while procs and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
                procs = codex_processes(node.codex_home)
            for proc in procs:
                with contextlib.suppress(psutil.Error):
                    left.append(f"{proc.pid} {' '.join(proc.cmdline())[:100]}")
                    proc.kill()
        return left
