"""The daemon's job runner: it does what a job's record says is due (docs/jobs.md, *The loop*).

Every decision of a job's loop is taken by folding the journal (:mod:`coven_codex.jobs.records`);
the runner folds the entries the daemon sees anyway, in its single pass, and acts:

- the job's thoughts and cancels, as ingress routes them (:meth:`JobRunner.routing` wraps the
  session manager), and the entries the daemon writes, as its one writer appends them
  (:meth:`JobRunner.observe`): never a read of its own of the journal;
- a small record per unfinished job, ``<conversation state>/jobs/<id>.json`` (the folded
  :class:`~coven_codex.jobs.records.JobRecord`), saved after every change, so a restarted daemon
  knows each job's phase without reading the journal again, and deleted when the job is over.

What is due: a continuation thought after a turn cut short by a death (``continuation_due``), the
gates after a completed attempt (``checking``: commands run in the job's ``cwd``, each in its own
process group, bounded in time and output, killed on cancel; their results written as one
``job_gates`` status), the judge's thought in ``job:<id>:judge`` with the verdict's JSON Schema as
its output schema (``judge_due``), the next attempt's thought (``next_attempt_due``), and at the
end the notice to the job's ``notify`` conversation. Thoughts carry deterministic ids, so the
record, in any process, recognises them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from pydantic import ValidationError

from coven_codex.agent.ingress import Router
from coven_codex.agent.job_names import JOB_PREFIX, JOB_SENDER
from coven_codex.agent.thread_options import OptionsRefused, check_cwd
from coven_codex.codex.process import spawn, terminate_tree
from coven_codex.entries import (
    ApprovalEntry,
    BaseEntry,
    CancelEntry,
    DeltaEntry,
    ResetEntry,
    ResponseEntry,
    SettingsEntry,
    ThoughtEntry,
)
from coven_codex.jobs.records import (
    CONTINUATION_TEXT,
    RUNNER_PHASES,
    VERDICT_SCHEMA,
    GateResult,
    GatesEntry,
    JobFolder,
    JobPhase,
    JobRecord,
    gates_id,
    job_conversation,
    judge_conversation,
)
from coven_codex.journal import Journal, JournalError, Position
from coven_codex.support.limits import cut

log = logging.getLogger(__name__)

JOBS_DIR = "jobs"
"""The runner's records live in ``<conversation state>/jobs/``."""
GATE_OUTPUT_CHARS = 16_000
"""A gate's output is kept up to this many characters: its first quarter and its end."""
KILL_GRACE = 2.0
"""A gate past its timeout or cancelled gets SIGTERM, then SIGKILL this many seconds later."""
CONFLICT_PATTERN = r"^(<<<<<<<|>>>>>>>)( |$)"
"""A merge conflict marker at the start of a line (``git grep -E``)."""

Append = Callable[[BaseEntry], Awaitable[object]]


class JobRunner:
    """Runs the loop of the jobs this daemon serves (module docstring)."""

    def __init__(
        self,
        journal: Journal,
        directory: Path,
        *,
        roots: Sequence[Path],
        write: Append,
    ) -> None:
        """``directory``: where the records live; ``roots``: where a job's ``cwd`` may lie (the daemon's
        workspace first, its default); ``write``: the daemon's writer (the notices to chats)."""
        self.journal = journal
        self.directory = directory
        self.roots = list(roots)
        self._write = write
        self.folder = JobFolder()
        self._due: asyncio.Queue[str] = asyncio.Queue()
        self._gates: dict[str, asyncio.Task[None]] = {}
        self._loaded = False

    # -- what feeds it ---------------------------------------------------------------------------
    def routing(self, inner: Router) -> Router:
        """``inner`` (the session manager) as ingress's router, telling the runner of job entries first."""
        return _Routing(self, inner)

    def observe(self, entry: BaseEntry) -> None:
        """An entry the daemon wrote (its writer's ``on_written``)."""
        if not isinstance(entry, DeltaEntry) and entry.conversation.startswith(JOB_PREFIX):
            self._take(entry)

    def _take(self, entry: BaseEntry) -> None:
        before = None
        job_id = _job_id(entry.conversation)
        if job_id is not None and job_id in self.folder.jobs:
            before = self.folder.jobs[job_id].model_dump_json()
        job = self.folder.feed(entry)
        if job is None or job.model_dump_json() == before:
            return
        self._save(job)
        if job.phase in RUNNER_PHASES or job.phase is JobPhase.ENDED:
            self._due.put_nowait(job.id)

    # -- the records -----------------------------------------------------------------------------
    def load(self) -> None:
        """Read the records of unfinished jobs (start-up, before ingress runs)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for path in sorted(self.directory.glob("*.json")):
            try:
                job = JobRecord.model_validate_json(path.read_bytes())
            except (OSError, ValidationError) as exc:
                log.error("job record %s is unreadable (%s); that job is no longer followed", path, exc)
                continue
            self.folder.jobs[job.id] = job
            if job.phase in RUNNER_PHASES or job.phase is JobPhase.ENDED:
                self._due.put_nowait(job.id)
        self._loaded = True
        if self.folder.jobs:
            log.info("jobs: %d unfinished job(s) followed from before the start", len(self.folder.jobs))

    def _path(self, job_id: str) -> Path:
        return self.directory / f"{job_id}.json"

    def _save(self, job: JobRecord) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self._path(job.id)
        temporary = path.with_suffix(".tmp")
        temporary.write_text(job.model_dump_json(exclude={"events"}))
        os.replace(temporary, path)

    # -- acting ----------------------------------------------------------------------------------
    async def run(self) -> None:
        """Act on due jobs until cancelled (then end every gate still running)."""
        if not self._loaded:
            self.load()
        try:
            async with asyncio.TaskGroup() as group:
                while True:
                    job_id = await self._due.get()
                    job = self.folder.jobs.get(job_id)
                    if job is None:
                        continue
                    try:
                        await self._act(job, group)
                    except (JournalError, OSError) as exc:
                        log.error(
                            "job %s: could not write what is due (%s): %s; it is written at the next start",
                            job_id,
                            job.phase.value,
                            exc,
                        )
        finally:
            for task in self._gates.values():
                task.cancel()

    async def _act(self, job: JobRecord, group: asyncio.TaskGroup) -> None:
        phase = job.phase
        if phase is JobPhase.ENDED:
            gate = self._gates.pop(job.id, None)
            if gate is not None:
                gate.cancel()
            judging = job.current.judge[-1] if job.current.judge else None
            if job.state == "cancelled" and judging is not None and judging.verdict is None and judging.problem is None:
                # (cancelled while its judge ran: that turn is stopped too)
                await self.journal.append(
                    CancelEntry(conversation=judge_conversation(job.id), sender=JOB_SENDER, queued=True)
                )
            await self._notify(job)
            self.folder.jobs.pop(job.id, None)
            with contextlib.suppress(FileNotFoundError):
                self._path(job.id).unlink()
            return
        if phase is JobPhase.CHECKING:
            if job.id not in self._gates:
                self._gates[job.id] = group.create_task(self._check(job.id, job.current.number), name=f"gates {job.id}")
            return
        if phase is JobPhase.JUDGE_DUE:
            await self._append(
                ThoughtEntry(
                    id=job.next_judge_id(),
                    conversation=judge_conversation(job.id),
                    sender=JOB_SENDER,
                    text=judge_prompt(job),
                    cwd=job.cwd,
                    model=job.model,
                    timeout=job.timeout,
                    output_schema=VERDICT_SCHEMA,
                )
            )
            return
        thought_id = job.next_thought_id()
        if thought_id is None:
            return
        text = CONTINUATION_TEXT if phase is JobPhase.CONTINUATION_DUE else job.due_message or CONTINUATION_TEXT
        log.info("job %s: %s (%s)", job.id, phase.value.replace("_", " "), thought_id)
        await self._append(
            ThoughtEntry(id=thought_id, conversation=job_conversation(job.id), sender=JOB_SENDER, text=text)
        )

    async def _append(self, entry: BaseEntry) -> None:
        await self.journal.append(entry)
        self._take(entry)

    async def _check(self, job_id: str, attempt: int) -> None:
        """Run the gates of ``attempt`` and write their results (cancelled: the gates are ended)."""
        try:
            job = self.folder.jobs[job_id]
            results = await run_gates(job, self.roots)
            current = self.folder.jobs.get(job_id)
            if current is None or current.phase is not JobPhase.CHECKING or current.current.number != attempt:
                return
            await self._append(
                GatesEntry(
                    id=gates_id(job_id, attempt),
                    conversation=job_conversation(job_id),
                    in_reply_to=job.current.thought_id,
                    text=", ".join(f"{cut(g.name, 40)}: {'passed' if g.passed else 'failed'}" for g in results),
                    gates=results,
                )
            )
        except (JournalError, OSError) as exc:
            log.error(
                "job %s: the gates' results could not be written (%s); they run again at the next start", job_id, exc
            )
        finally:
            self._gates.pop(job_id, None)

    async def _notify(self, job: JobRecord) -> None:
        """Tell the job's ``notify`` conversation of a success or a hard failure (nothing else)."""
        where = job.spec.notify
        if where is None or job.state == "cancelled":
            return
        await self._write(
            ResponseEntry(id=f"job-notify:{job.id}", conversation=where, text=notice(job), in_reply_to=None)
        )


class _Routing:
    """Ingress's router: job thoughts and cancels go to the runner, then everything to the manager."""

    def __init__(self, runner: JobRunner, inner: Router) -> None:
        self._runner = runner
        self._inner = inner

    def route_thought(self, entry: ThoughtEntry, position: Position) -> bool:
        if entry.conversation.startswith(JOB_PREFIX) and entry.sender == JOB_SENDER:
            self._runner._take(entry)
        return self._inner.route_thought(entry, position)

    def route_reset(self, entry: ResetEntry | SettingsEntry, position: Position) -> bool:
        return self._inner.route_reset(entry, position)

    def route_cancel(self, entry: CancelEntry, *, live: bool) -> None:
        if entry.conversation.startswith(JOB_PREFIX):
            self._runner._take(entry)
        self._inner.route_cancel(entry, live=live)

    def route_approval(self, entry: ApprovalEntry, *, live: bool) -> None:
        self._inner.route_approval(entry, live=live)


def _job_id(conversation: str) -> str | None:
    if not conversation.startswith(JOB_PREFIX):
        return None
    return conversation[len(JOB_PREFIX) :].removesuffix(":judge")


# -- the gates -----------------------------------------------------------------------------------
async def run_gates(job: JobRecord, roots: Sequence[Path]) -> list[GateResult]:
    """Run ``job``'s gates, one after the other, in its ``cwd`` (built-ins first)."""
    try:
        cwd = Path(check_cwd(job.cwd, roots) if job.cwd is not None else roots[0])
    except OptionsRefused as exc:
        return [GateResult(name="cwd", passed=False, ran=False, problem=str(exc))]
    spec = job.spec
    results: list[GateResult] = []
    if spec.require_diff:
        found = await run_command(["git", "status", "--porcelain"], cwd, spec.check_timeout, name="require_diff")
        if found.ran and found.exit_code == 0:
            found.passed = bool(found.output.strip())
            found.problem = None if found.passed else "the working tree has no change"
        elif found.ran:
            found.ran, found.problem = False, f"git status failed (is {cwd} a git work tree?)"
        results.append(found)
    if spec.no_conflict_markers:
        found = await run_command(
            ["git", "grep", "-n", "-I", "--untracked", "-E", CONFLICT_PATTERN],
            cwd,
            spec.check_timeout,
            name="no_conflict_markers",
        )
        if found.ran and found.exit_code in (0, 1):
            found.passed = found.exit_code == 1  # (git grep: 1 = nothing found)
            found.problem = None if found.passed else "conflict markers found"
        elif found.ran:
            found.ran, found.problem = False, f"git grep failed (is {cwd} a git work tree?)"
        results.append(found)
    for command in spec.checks:
        results.append(await run_command(["/bin/sh", "-c", command], cwd, spec.check_timeout, name=command))
    return results


async def run_command(argv: list[str], cwd: Path, limit: float, *, name: str) -> GateResult:
    """Run one gate in its own process group: its exit status, bounded output and time. Past
    ``limit`` seconds, or when cancelled, the whole group is ended (the cancel is then raised on)."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    try:
        child = await spawn(
            argv, env=os.environ, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
    except OSError as exc:
        return GateResult(name=name, passed=False, ran=False, problem=f"could not start: {exc}")
    assert child.stdout is not None
    output = _Bounded(GATE_OUTPUT_CHARS)
    problem: str | None = None
    try:
        async with asyncio.timeout(limit):
            while chunk := await child.stdout.read(65536):
                output.add(chunk)
            await child.wait()
    except TimeoutError:
        problem = f"ran past its timeout ({limit:g} s) and was killed"
        await terminate_tree(child, KILL_GRACE)
    except asyncio.CancelledError:
        await asyncio.shield(terminate_tree(child, KILL_GRACE))
        raise
    code = child.returncode
    return GateResult(
        name=name,
        passed=problem is None and code == 0,
        exit_code=code,
        output=output.text(),
        seconds=round(loop.time() - began, 3),
        problem=problem,
    )


class _Bounded:
    """A command's output kept within ``limit`` characters: its start and its end."""

    def __init__(self, limit: int) -> None:
        self._head = bytearray()
        self._tail = bytearray()
        self._dropped = 0
        self._head_limit = limit // 4
        self._tail_limit = limit - self._head_limit

    def add(self, chunk: bytes) -> None:
        room = self._head_limit - len(self._head)
        if room > 0:
            self._head += chunk[:room]
            chunk = chunk[room:]
        self._tail += chunk
        if len(self._tail) > self._tail_limit:
            extra = len(self._tail) - self._tail_limit
            self._dropped += extra
            del self._tail[:extra]

    def text(self) -> str:
        head = self._head.decode(errors="replace")
        tail = self._tail.decode(errors="replace")
        if self._dropped:
            return f"{head}\n… ({self._dropped} bytes left out) …\n{tail}"
        return head + tail


# -- what the runner writes ------------------------------------------------------------------------
JUDGE_PROMPT = """You are the reviewer of a task another agent worked on in {cwd}. Do not change any file.
Look at the working directory as you need (read only), then answer with a JSON verdict only:
decision "pass" when the task is fully done, else "fail"; confidence from 0 to 1; missing: what is
still missing (empty when it passes); next_prompt: the instruction the worker needs to finish
(empty when it passes).

The task:
{prompt}

The worker's last message:
{final}

{gates}"""


def judge_prompt(job: JobRecord) -> str:
    """What the judge is asked for the job's current attempt."""
    gates = job.current.gates or []
    passed = (
        "Checks that passed: " + ", ".join(cut(gate.name, 80) for gate in gates) if gates else "No checks were run."
    )
    return JUDGE_PROMPT.format(
        cwd=job.cwd or "the workspace",
        prompt=cut(job.prompt, 20_000),
        final=cut(job.current.final_message or "(none)", 20_000),
        gates=passed,
    )


def notice(job: JobRecord) -> str:
    """The chat notice of a job's end: a summary on success, an escalation on a hard failure."""
    attempts = f"{len(job.attempts)} attempt{'s' if len(job.attempts) != 1 else ''}"
    head = f"Job {job.id} {job.state} after {attempts}: {job.end_reason}."
    lines = [head if job.state == "succeeded" else f"Escalation: {head}"]
    if job.thread_id:
        lines.append(f"Thread: {job.thread_id} (continue it with `coven-codex job submit --resume {job.thread_id}`).")
    if job.verdict is not None:
        verdict = job.verdict
        lines.append(f"Verdict: {verdict.decision} (confidence {verdict.confidence:g})")
        lines.extend(f"- missing: {item}" for item in verdict.missing)
    if job.error is not None and job.state != "succeeded":
        lines.append(f"Error: {job.error.code}: {job.error.message}")
        if job.error.hint:
            lines.append(f"What to do: {job.error.hint}")
    if job.final_message:
        lines.append(f"Final message:\n{cut(job.final_message, 4000)}")
    return "\n".join(lines)
