"""Harness for the agent's end-to-end tests: the daemon as a real subprocess
(``python -m coven_codex run``), the real Codex CLI, the scripted model server in the test
process, a FileJournal on disk (or the journal ``journal_name`` names, e.g. on Redis); plus a check
that no process of the run is left behind."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomlkit

from coven_codex.agent.scope import scope_directory
from coven_codex.agent.state import SESSIONS_DIR
from coven_codex.entries import BaseEntry, ThoughtEntry
from coven_codex.journal import START, FileJournal, Journal, JournalItem, JournalRecord
from coven_codex.journal.opening import open_journal
from coven_codex.settings import Settings
from coven_codex.testing.codex_config import DEFAULT_ENV_KEY, codex_config
from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.request_log import HARNESS_PREFIXES, RecordedRequest
from coven_codex.testing.responders import Responder, echo_responder, pending_tool_output
from coven_codex.testing.steps import CallTool, Reply, TurnScript

ROOT = Path(__file__).resolve().parent.parent.parent


@dataclass
class Daemon:
    process: asyncio.subprocess.Process
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@dataclass
class AgentHarness:
    tmp: Path
    codex_bin: Path
    server: ScriptedModelServer
    extra_args: list[str] = field(default_factory=list)
    daemons: list[Daemon] = field(default_factory=list)
    journal_name: str | None = None
    """The daemon's ``--journal`` when not the file ``journal.jsonl`` (a ``redis://`` URL)."""

    def __post_init__(self) -> None:
        self.workspace = self.tmp / "ws"
        self.workspace.mkdir(exist_ok=True)
        self.journal_path = self.tmp / "journal.jsonl"
        # The defaults, outside the workspace; tests/conftest.py points XDG_STATE_HOME into a temp dir.
        defaults = Settings(workspace=self.workspace)
        self.state_dir = defaults.resolved_state_dir
        self.codex_home = defaults.resolved_codex_home
        self.base_config = self.tmp / "base.toml"
        self.write_base_config()
        self.journal: Journal = (
            FileJournal(self.journal_path, durability="never")
            if self.journal_name is None
            else open_journal(self.journal_name)
        )
        self._runs = 0
        self._seen: list[BaseEntry] = []
        self._read_to = START
        self._file_read: tuple[tuple[int, int], int, bytes] | None = None
        """The file journal as last read: its identity, and its last line's offset and bytes."""

    def sessions_dir(self, state_dir: Path | None = None) -> Path:
        """Where the daemon keeps the file journal's conversation states: ``<state_dir>/journals/<the
        journal's identity>/sessions`` (``state_dir``: the default one; the daemon must have started once)."""
        identity = (self.journal_path.with_name(self.journal_path.name + ".cursors") / "journal-id").read_text()
        return scope_directory(state_dir or self.state_dir, identity.strip()) / SESSIONS_DIR

    async def use_journal(self, path: Path) -> None:
        """From the next start on, the daemon serves (and the test writes to) the file journal ``path``."""
        await self.journal.aclose()
        self.journal_path = path
        self.journal = FileJournal(path, durability="never")
        self._forget_read()

    def write_base_config(self, **extra: Any) -> None:
        config = codex_config(self.server.base_url, extra=extra or None)
        self.base_config.write_text(tomlkit.dumps(config))

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in {"CODEX_HOME", "OPENAI_API_KEY"}}
        env[DEFAULT_ENV_KEY] = "scripted-test-key"
        env["PYTHONUNBUFFERED"] = "1"
        return env

    async def start(self, *args: str) -> Daemon:
        self._runs += 1
        log_path = self.tmp / f"daemon-{self._runs}.log"
        argv = [
            sys.executable,
            "-m",
            "coven_codex",
            "--log-level",
            "DEBUG",
            "run",
            "--workspace",
            str(self.workspace),
            "--journal",
            self.journal_name or str(self.journal_path),
            "--codex-config",
            str(self.base_config),
            "--codex-path",
            str(self.codex_bin),
            "--kill-grace",
            "3",
            "--restart-backoff",
            "0.2",
            *self.extra_args,
            *args,
        ]
        with log_path.open("wb") as log:
            process = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log, env=self.env, cwd=str(self.tmp)
            )
        daemon = Daemon(process, log_path)
        self.daemons.append(daemon)
        return daemon

    async def until_logged(self, text: str, *, timeout: float = 60.0) -> str:
        """Wait until the newest daemon's log holds ``text`` (e.g. ``"ready (pid"``); its log."""
        deadline = time.monotonic() + timeout
        while True:
            log = self.daemons[-1].log()
            if text in log:
                return log
            if time.monotonic() > deadline or self.daemons[-1].process.returncode is not None:
                raise AssertionError(f"the daemon never logged {text!r}:\n{log[-3000:]}")
            await asyncio.sleep(0.05)

    async def stop(self, daemon: Daemon, *, timeout: float = 30.0) -> int:
        daemon.process.send_signal(signal.SIGTERM)
        try:
            return await asyncio.wait_for(daemon.process.wait(), timeout)
        except TimeoutError:
            daemon.process.kill()
            await daemon.process.wait()
            raise AssertionError(f"daemon did not stop within {timeout}s:\n{daemon.log()[-3000:]}") from None

    async def kill9(self, daemon: Daemon) -> None:
        with contextlib.suppress(ProcessLookupError):
            daemon.process.kill()
        await daemon.process.wait()

    async def think(self, conversation: str, text: str, **fields: Any) -> JournalRecord:
        return await self.journal.append(ThoughtEntry(conversation=conversation, text=text, **fields))

    async def append(self, entry: BaseEntry) -> JournalRecord:
        return await self.journal.append(entry)

    async def entries(self) -> list[BaseEntry]:
        """Every entry of the journal. A single file journal is read on from where the last look
        ended (tests wait by looking often: reading a journal of thousands of entries whole at every
        look took a core of its own); read whole again when the file is no longer what was read
        (truncated, replaced, rotated, rolled over into segments). Other journals are read whole."""
        if not self._file_unchanged():
            self._forget_read()
        identity = self._file_identity()
        items = await self.journal.read(self._read_to)
        self._seen.extend(item.entry for item in items if isinstance(item, JournalRecord))
        if items:
            self._read_to = items[-1].end
            self._remember(identity, items[-1])
        return list(self._seen)

    def _forget_read(self) -> None:
        self._seen, self._read_to, self._file_read = [], START, None

    def _file_identity(self) -> tuple[int, int] | None:
        if self.journal_name is not None:
            return None
        try:
            stat = self.journal_path.stat()
        except FileNotFoundError:
            return None
        return (stat.st_dev, stat.st_ino)

    def _remember(self, identity: tuple[int, int] | None, last: JournalItem) -> None:
        """Note what the next look checks: the file read (its identity before the read) and its last line."""
        self._file_read = None
        if identity is None or last.end.major != 0:
            return
        with contextlib.suppress(OSError), self.journal_path.open("rb") as file:
            file.seek(last.start.minor)
            self._file_read = (identity, last.start.minor, file.read(last.end.minor - last.start.minor))

    def _file_unchanged(self) -> bool:
        """The journal still holds what was read up to :attr:`_read_to`, unchanged: the same file
        (not replaced or rotated), at least as long, ending the part read with the same last line
        (not truncated and written again)."""
        if self._read_to == START:
            return True
        if self._file_read is None:
            return False  # not a single file (Redis, segments): read whole
        identity, offset, line = self._file_read
        if self._file_identity() != identity:
            return False
        try:
            with self.journal_path.open("rb") as file:
                file.seek(offset)
                return file.read(len(line)) == line
        except OSError:
            return False

    async def wait_for(
        self,
        predicate: Callable[[list[BaseEntry]], bool],
        *,
        timeout: float = 60.0,
        what: str = "entries",
        while_progressing: bool = False,
    ) -> list[BaseEntry]:
        """Wait until ``predicate`` holds for the journal's entries, at most ``timeout`` seconds; with
        ``while_progressing``, at most ``timeout`` seconds without a new entry (long runs whose
        speed depends on the machine's load: a stuck daemon still fails within ``timeout``)."""
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
                logs = "\n".join(d.log()[-4000:] for d in self.daemons[-1:])
                shown = "\n".join(
                    f"  {e.conversation} {e.kind} {getattr(e, 'state', '')} {e.text[:80]!r}" for e in entries[-30:]
                )
                raise AssertionError(f"timed out waiting for {what}; journal tail:\n{shown}\nlog:\n{logs}")
            await asyncio.sleep(0.05)

    async def cleanup(self) -> None:
        for daemon in self.daemons:
            if daemon.process.returncode is None:
                daemon.process.kill()
                await daemon.process.wait()
        await self.journal.aclose()


def replies(entries: list[BaseEntry], conversation: str | None = None) -> list[str]:
    return [
        e.text for e in entries if e.kind == "response" and (conversation is None or e.conversation == conversation)
    ]


def user_prompts(request: RecordedRequest) -> list[str]:
    return [t for t in request.user_texts() if not t.startswith(HARNESS_PREFIXES)]


def make_responder(rules: dict[str, Callable[[RecordedRequest], Any]]) -> Responder:
    """Echo, except prompts starting with a rule's prefix (the newest user text decides)."""

    def respond(request: RecordedRequest) -> Any:
        prompts = user_prompts(request)
        last = prompts[-1] if prompts else ""
        if request.input_items() and request.input_items()[-1].get("type") == "function_call_output":
            return echo_responder(request)
        for prefix, rule in rules.items():
            if last.startswith(prefix):
                return rule(request)
        return echo_responder(request)

    return respond


def send_file_when_asked(path: str, caption: str) -> Responder:
    """The model: a prompt starting with ``send`` calls the built-in ``send_file(path, caption)``, then
    replies ``sent: <the spell's answer>``; any other prompt gets ``nothing to send``."""

    def respond(request: RecordedRequest) -> TurnScript:
        output = pending_tool_output(request)
        if output is not None:
            return Reply(f"sent: {output.output}")
        prompts = user_prompts(request)
        if prompts and prompts[-1].startswith("send"):
            return CallTool("coven.send_file", {"path": path, "caption": caption})
        return Reply("nothing to send")

    return respond
