"""The daemon's job runner (docs/jobs.md, *The loop*): gates run in their own process group,
bounded in time and output, ended on cancel; the records carry a job across a restart; the notice.

The runner is fed as the daemon feeds it (ingress's routing, the writer's entries) over a
:class:`MemoryJournal`; the gates are real processes.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import psutil
import pytest

from coven_codex.entries import (
    ApprovalEntry,
    BaseEntry,
    CancelEntry,
    ResetEntry,
    ResponseEntry,
    StatusEntry,
    ThoughtEntry,
)
from coven_codex.jobs.records import (
    GATE_FEEDBACK_CHARS,
    GatesEntry,
    JobPhase,
    JobSpec,
    JobThought,
    attempt_id,
    read_jobs,
)
from coven_codex.jobs.runner import GATE_OUTPUT_CHARS, JobRunner, run_command
from coven_codex.journal import JournalRecord, MemoryJournal, Position

C = "job:j1"


class Ingress:
    """Where the runner's routing passes entries on (the session manager's place): it keeps them."""

    def __init__(self) -> None:
        self.routed: list[BaseEntry] = []

    def route_thought(self, entry: ThoughtEntry, position: Position) -> bool:
        self.routed.append(entry)
        return False

    def route_reset(self, entry: ResetEntry, position: Position) -> bool:
        return False

    def route_cancel(self, entry: CancelEntry, *, live: bool) -> None:
        self.routed.append(entry)

    def route_approval(self, entry: ApprovalEntry, *, live: bool) -> None:
        pass


def completed_turn(to: str = "t1") -> list[BaseEntry]:
    return [
        StatusEntry(conversation=C, state="turn_started", in_reply_to=to),
        ResponseEntry(conversation=C, text="done", in_reply_to=to),
        StatusEntry(conversation=C, state="turn_completed", in_reply_to=to),
    ]


class Harness:
    def __init__(self, tmp: Path) -> None:
        self.journal = MemoryJournal()
        self.directory = tmp / "jobs"
        self.workspace = tmp / "ws"
        self.workspace.mkdir(exist_ok=True)
        self.written: list[BaseEntry] = []
        self.ingress = Ingress()

    def runner(self) -> JobRunner:
        async def write(entry: BaseEntry) -> None:
            self.written.append(entry)
            await self.journal.append(entry)

        runner = JobRunner(self.journal, self.directory, roots=[self.workspace], write=write)
        self.routing = runner.routing(self.ingress)
        return runner

    async def submit(self, runner: JobRunner, spec: JobSpec) -> None:
        thought = JobThought(id="t1", conversation=C, text="do it", cwd=str(self.workspace), job=spec)
        await self.journal.append(thought)
        self.routing.route_thought(thought, 0)

    async def daemon_writes(self, runner: JobRunner, *entries: BaseEntry) -> None:
        for entry in entries:
            await self.journal.append(entry)
            runner.observe(entry)

    async def until(self, match: Callable[[BaseEntry], bool]) -> BaseEntry:
        """The first entry that ``match``es (the journal followed, not polled)."""
        async with asyncio.timeout(60):
            async for item in self.journal.tail():
                if isinstance(item, JournalRecord) and match(item.entry):
                    return item.entry
        raise AssertionError("the journal ended")


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[tuple[Harness, JobRunner]]:
    h = Harness(tmp_path)
    runner = h.runner()
    task = asyncio.create_task(runner.run())
    try:
        yield h, runner
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_gate_past_its_timeout_is_ended_with_its_whole_process_group(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    command = f"sleep 300 & echo $! > {pids}; echo started; sleep 300"
    result = await run_command(["/bin/sh", "-c", command], tmp_path, 1.0, name=command)
    assert not result.passed and result.problem is not None and "timeout" in result.problem
    assert result.output.startswith("started")
    background = int(pids.read_text())
    assert not psutil.pid_exists(background) or psutil.Process(background).status() == psutil.STATUS_ZOMBIE


async def test_a_gate_s_output_is_kept_to_its_start_and_its_end(tmp_path: Path) -> None:
    command = "printf 'FIRST'; head -c 100000 /dev/zero | tr '\\0' x; printf 'LAST'; exit 3"
    result = await run_command(["/bin/sh", "-c", command], tmp_path, 30.0, name="noisy")
    assert result.exit_code == 3 and not result.passed
    assert result.output.startswith("FIRST") and result.output.endswith("LAST")
    assert len(result.output) < GATE_OUTPUT_CHARS + 100 and "bytes left out" in result.output


async def test_failed_gates_start_the_next_attempt_with_their_bounded_output(
    running: tuple[Harness, JobRunner],
) -> None:
    h, runner = running
    await h.submit(runner, JobSpec(checks=["echo broken; exit 1", "true"], max_attempts=2))
    await h.daemon_writes(runner, *completed_turn())
    gates = await h.until(lambda e: getattr(e, "state", None) == "job_gates")
    assert isinstance(gates, StatusEntry) and gates.in_reply_to == "t1"
    await h.until(lambda e: e.id == attempt_id("j1", 2))
    job = (await read_jobs(h.journal)).jobs["j1"]
    assert job.phase is JobPhase.QUEUED and len(job.attempts) == 2
    assert job.attempts[1].message.startswith("The work is not done yet")
    assert "$ echo broken; exit 1" in job.attempts[1].message and "broken" in job.attempts[1].message
    assert len(job.attempts[1].message) < GATE_FEEDBACK_CHARS + 500
    assert [g.passed for g in job.attempts[0].gates or []] == [False, True]


async def test_a_cancel_while_a_gate_runs_ends_the_gate_s_process_group(
    running: tuple[Harness, JobRunner], tmp_path: Path
) -> None:
    h, runner = running
    fifo = tmp_path / "started"
    os.mkfifo(fifo)
    await h.submit(runner, JobSpec(checks=[f"echo $$ > {fifo}; sleep 300"]))
    await h.daemon_writes(runner, *completed_turn())
    pid = int((await asyncio.wait_for(asyncio.to_thread(fifo.read_text), 30)).strip())
    gate = psutil.Process(pid)
    cancel = CancelEntry(conversation=C, sender="jobs", queued=True)
    await h.journal.append(cancel)
    h.routing.route_cancel(cancel, live=True)
    await asyncio.wait_for(asyncio.to_thread(gate.wait, 30), 40)
    job = (await read_jobs(h.journal)).jobs["j1"]
    assert job.state == "cancelled" and job.end_reason == "cancelled while checking"
    assert not any(isinstance(e, GatesEntry) or getattr(e, "state", "") == "job_gates" for e in h.written)
    assert not list(h.directory.glob("*.json"))  # an ended job's record is gone


async def test_a_restarted_runner_takes_up_a_job_from_its_record(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    first = h.runner()
    await h.submit(first, JobSpec(checks=["true"], notify="chat"))
    await h.daemon_writes(first, *completed_turn())
    assert [p.name for p in h.directory.glob("*.json")] == ["j1.json"]  # checking, never acted on
    second = h.runner()  # the daemon's next start: nothing of the journal is read again
    task = asyncio.create_task(second.run())
    try:
        notice = await h.until(lambda e: e.kind == "response" and e.conversation == "chat")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    job = (await read_jobs(h.journal)).jobs["j1"]
    assert job.state == "succeeded" and job.end_reason == "attempt 1 passed every check"
    assert notice.id == "job-notify:j1" and notice.text.startswith("Job j1 succeeded after 1 attempt")
    assert "Final message:\ndone" in notice.text
    assert not list(h.directory.glob("*.json"))


async def test_a_hard_failure_escalates_to_the_notify_conversation(running: tuple[Harness, JobRunner]) -> None:
    h, runner = running
    await h.submit(runner, JobSpec(checks=["true"], notify="ops", max_attempts=1))
    (h.workspace / "gone").mkdir()
    h.workspace.rename(h.workspace.with_name("moved"))  # the cwd is gone: the gate cannot run
    await h.daemon_writes(runner, *completed_turn())
    notice = await h.until(lambda e: e.kind == "response" and e.conversation == "ops")
    assert notice.text.startswith("Escalation: Job j1 failed after 1 attempt: a check could not run")
    assert "CHECK_FAILED" in notice.text


async def test_a_cancel_while_the_judge_runs_stops_the_judge_s_turn_too(running: tuple[Harness, JobRunner]) -> None:
    h, runner = running
    await h.submit(runner, JobSpec(judge=True))
    await h.daemon_writes(runner, *completed_turn())
    await h.until(lambda e: e.conversation == "job:j1:judge" and e.kind == "thought")
    cancel = CancelEntry(conversation=C, sender="jobs", queued=True)
    await h.journal.append(cancel)
    h.routing.route_cancel(cancel, live=True)
    stop = await h.until(lambda e: e.conversation == "job:j1:judge" and e.kind == "cancel")
    assert isinstance(stop, CancelEntry) and stop.queued
    job = (await read_jobs(h.journal)).jobs["j1"]
    assert job.state == "cancelled" and job.end_reason == "cancelled while judging"
