"""A job's record, derived from the journal's entries alone (docs/jobs.md).

A job is the conversation ``job:<id>``: the thought that submitted it (its text, its thread
options, and its :class:`JobSpec` in the field ``job``), then the entries the daemon wrote for it.
Its judge, when it has one, is the conversation ``job:<id>:judge``. Folding those entries in
journal order gives the record, and with it every decision the job's loop takes: this module is
the one place they are taken. The daemon's job runner (:mod:`coven_codex.jobs.runner`) folds the
same entries and does what the record says is due (a continuation, the checks, the judge's turn,
the next attempt); any other process derives the same record from the same journal, through the
:class:`~coven_codex.journal.Journal` protocol.

The loop, by :class:`JobPhase`: ``queued`` → ``running`` (an attempt's turn) → when the turn
completes, ``checking`` (the gates, when it has some) → ``judge_due`` / ``judging`` (the judge,
when asked) → ``ended``, or back to ``next_attempt_due`` (a failed gate or verdict, attempts
left) → ``queued``. A turn cut short by a daemon or Codex death goes to ``continuation_due``
once (unless the job says never), then ``queued`` again with the continuation.
"""

from __future__ import annotations

import json
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from coven_codex.agent.job_names import JOB_PREFIX, JOB_SENDER, TURN_ABORTED, TURN_COMPLETED, TURN_FAILED, TURN_STARTED
from coven_codex.codex.errors import ErrorCode
from coven_codex.entries import (
    CODEX_SENDER,
    BaseEntry,
    CancelEntry,
    DeltaEntry,
    ErrorEntry,
    ResponseEntry,
    StatusEntry,
    ThoughtEntry,
    TokenUsage,
)
from coven_codex.journal import Journal, JournalRecord
from coven_codex.support.limits import REFUSED_CODE, cut

JobState = Literal["queued", "running", "succeeded", "failed", "cancelled", "timed_out"]
JOB_STATES: tuple[JobState, ...] = ("queued", "running", "succeeded", "failed", "cancelled", "timed_out")
"""Every state a job can be in, in the order it goes through them."""
TERMINAL: frozenset[JobState] = frozenset({"succeeded", "failed", "cancelled", "timed_out"})
"""The states a job ends in; it never leaves one."""
TIMEOUT_CODES = frozenset({ErrorCode.OUTER_TIMEOUT.value, ErrorCode.STREAM_IDLE.value})
"""Error codes that mean the job ran out of time."""
THOUGHT_CANCELLED = "thought_cancelled"
"""The daemon's answer to a thought a ``cancel`` dropped before it reached Codex."""
MAX_EVENTS = 1000
"""At most this many of a job's entries are kept for ``--events`` (the newest ones)."""
JUDGE_SUFFIX = ":judge"
"""The judge of job ``<id>`` talks in the conversation ``job:<id>:judge`` (a thread of its own)."""
GATES_STATE = "job_gates"
"""The ``status`` the job runner writes with an attempt's gate results (field ``gates``)."""
SPEC_FIELD = "job"
"""The submitting thought's field that carries the :class:`JobSpec`."""
DUPLICATE_PREFIX = "duplicate-id@"
"""The id of the daemon's report of a thought repeating an earlier one's id (dropped; it says nothing
of the job's turn: a runner killed before saving writes a due thought again, docs/jobs.md)."""
MAX_JUDGE_TRIES = 3
"""A judge whose answer is not a valid verdict is asked again, this many times in all per attempt."""
MAX_CONTINUATIONS = 1
"""A job cut short by a death is continued this many times at most."""
MAX_ATTEMPTS_LIMIT = 20
"""The largest ``max_attempts`` a job may ask for."""
CONTINUATION_TEXT = (
    "Your previous turn on this task was cut short: the service running you (or Codex itself) stopped "
    "mid-turn. Continue the task from where it stopped; check what was already done before doing it again."
)
"""What a continuation asks, in the job's own thread."""


class JobPhase(StrEnum):
    """Where a job is in its loop (the module docstring); the runner acts on the ``*_due`` ones
    and on ``checking``."""

    QUEUED = "queued"
    RUNNING = "running"
    CONTINUATION_DUE = "continuation_due"
    CHECKING = "checking"
    JUDGE_DUE = "judge_due"
    JUDGING = "judging"
    NEXT_ATTEMPT_DUE = "next_attempt_due"
    ENDED = "ended"


RUNNER_PHASES = frozenset({JobPhase.CONTINUATION_DUE, JobPhase.CHECKING, JobPhase.JUDGE_DUE, JobPhase.NEXT_ATTEMPT_DUE})
"""The phases in which the job runner has something to do."""


def job_conversation(job_id: str) -> str:
    """The conversation a job lives in."""
    return f"{JOB_PREFIX}{job_id}"


def judge_conversation(job_id: str) -> str:
    """The conversation of a job's judge (its own Codex thread)."""
    return f"{JOB_PREFIX}{job_id}{JUDGE_SUFFIX}"


RUNNER_THOUGHTS = ("job-continue:", "job-attempt:", "job-judge:")
"""The prefixes of the ids of the thoughts the job runner writes."""


def continuation_id(job_id: str, attempt: int) -> str:
    """The id of the continuation thought that starts attempt ``attempt`` of ``job_id``."""
    return f"{RUNNER_THOUGHTS[0]}{job_id}:{attempt}"


def attempt_id(job_id: str, attempt: int) -> str:
    """The id of the thought that starts attempt ``attempt`` (2, ...) after a failed gate or verdict."""
    return f"{RUNNER_THOUGHTS[1]}{job_id}:{attempt}"


def judge_id(job_id: str, attempt: int, judge_try: int) -> str:
    """The id of the judge's thought for attempt ``attempt``, try ``judge_try``."""
    return f"{RUNNER_THOUGHTS[2]}{job_id}:{attempt}:{judge_try}"


def gates_id(job_id: str, attempt: int) -> str:
    """The id of the ``job_gates`` status of attempt ``attempt``."""
    return f"job-gates:{job_id}:{attempt}"


class JobSpec(BaseModel):
    """What the submitter asked of the job's loop (the submitting thought's field ``job``).

    Check commands come only from here: from the program that submitted the job, never from the
    workspace, the model, or a later thought.
    """

    model_config = ConfigDict(extra="forbid")

    continue_after_restart: bool = True
    """A turn cut short by a daemon or Codex death is continued once in the job's thread."""
    checks: list[str] = Field(default_factory=list)
    """Shell commands run in the job's ``cwd`` after each attempt; exit status 0 passes."""
    require_diff: bool = False
    """Built-in gate: the working tree differs from its git ``HEAD`` (``git status --porcelain``)."""
    no_conflict_markers: bool = False
    """Built-in gate: no file of the working tree holds a merge conflict marker."""
    judge: bool = False
    """After the gates pass, a judge turn in a thread of its own answers a JSON verdict."""
    max_attempts: int = Field(default=3, ge=1, le=MAX_ATTEMPTS_LIMIT)
    """Attempts at most (the prompt, then one per failed gate or verdict); a continuation is not one."""
    check_timeout: float = Field(default=600.0, gt=0, le=3600)
    """Seconds each check may run; past it its process group is killed and the check fails."""
    notify: str | None = Field(default=None, min_length=1, max_length=256)
    """A chat conversation told of the job's success (a summary) or hard failure (an escalation)."""

    @property
    def gated(self) -> bool:
        """The job has checks to pass after its turn (commands or built-ins)."""
        return bool(self.checks) or self.require_diff or self.no_conflict_markers

    @property
    def looped(self) -> bool:
        """A completed turn is not the end yet: gates or a judge follow."""
        return self.gated or self.judge


class JobThought(ThoughtEntry):
    """The thought that submits a job: a thought with its :class:`JobSpec` in the field ``job``."""

    sender: str = JOB_SENDER
    job: JobSpec


class Verdict(BaseModel):
    """The judge's answer (the JSON its turn must end with; :data:`VERDICT_SCHEMA`)."""

    model_config = ConfigDict(extra="forbid")

    decision: Literal["pass", "fail"]
    confidence: float = Field(ge=0, le=1)
    missing: list[str]
    """What the work still lacks (empty when it passes)."""
    next_prompt: str
    """What the worker should do next (empty when it passes)."""


VERDICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {"type": "string", "enum": ["pass", "fail"]},
        "confidence": {"type": "number"},
        "missing": {"type": "array", "items": {"type": "string"}},
        "next_prompt": {"type": "string"},
    },
    "required": ["decision", "confidence", "missing", "next_prompt"],
    "additionalProperties": False,
}
"""The judge turn's output schema (Codex's ``outputSchema``, strict: every field required)."""


def parse_verdict(text: str | None) -> Verdict | str:
    """The verdict in the judge's answer, or what is wrong with it."""
    if text is None:
        return "the judge answered nothing"
    try:
        return Verdict.model_validate(json.loads(text))
    except (json.JSONDecodeError, ValidationError) as exc:
        return f"not a verdict ({cut(str(exc).splitlines()[0], 160)}): {cut(text, 120)!r}"


class JobError(BaseModel):
    """Why a job failed: the daemon's classified error (docs/operations.md, error codes)."""

    code: str
    message: str
    hint: str = ""


class GateResult(BaseModel):
    """One gate's outcome after an attempt."""

    name: str
    """The command as given, or ``require_diff`` / ``no_conflict_markers``."""
    passed: bool
    exit_code: int | None = None
    output: str = ""
    """Its output (stdout and stderr), bounded: the start and the end of a long one."""
    seconds: float = 0.0
    problem: str | None = None
    """Why it could not give an answer (it could not start, it ran past its timeout): a hard failure
    when it could not start."""
    ran: bool = True
    """``False``: the gate could not be run at all (a hard failure of the job)."""


class GatesEntry(StatusEntry):
    """The ``job_gates`` status the job runner writes after an attempt's gates ran (read back as a
    ``status`` whose field ``gates`` holds the results)."""

    sender: str = JOB_SENDER
    state: str = GATES_STATE
    gates: list[GateResult]


class JudgeTry(BaseModel):
    """One judge turn for an attempt."""

    thought_id: str
    answer: str | None = None
    verdict: Verdict | None = None
    problem: str | None = None
    """Why the answer was not taken (not a valid verdict, the turn failed)."""
    usage: TokenUsage | None = None


AttemptKind = Literal["prompt", "continuation", "gate_feedback", "judge_feedback"]


class JobAttempt(BaseModel):
    """One turn of the job's thread and what came of it."""

    number: int
    """1, 2, ...: a continuation counts as an attempt of its own."""
    kind: AttemptKind
    thought_id: str
    message: str
    """What the attempt asked (the prompt, the continuation, a gate's output, the verdict's next prompt)."""
    started_at: datetime | None = None
    ended_at: datetime | None = None
    outcome: str | None = None
    """How its turn ended: ``turn_completed``, ``turn_failed``, ``turn_aborted``, ``thought_cancelled``,
    ``refused``."""
    final_message: str | None = None
    error: JobError | None = None
    usage: TokenUsage | None = None
    gates: list[GateResult] | None = None
    judge: list[JudgeTry] = Field(default_factory=list)


class JobEvent(BaseModel):
    """One entry the daemon wrote for the job (``job result --events``)."""

    kind: str
    ts: datetime
    text: str
    state: str | None = None
    tool: str | None = None
    code: str | None = None


class JobRecord(BaseModel):
    """Everything known about one job, derived from the journal."""

    id: str
    state: JobState = "queued"
    phase: JobPhase = JobPhase.QUEUED
    prompt: str = ""
    cwd: str | None = None
    model: str | None = None
    timeout: float | None = None
    resume_thread: str | None = None
    """The thread the job continues (took over)."""
    fork_thread: str | None = None
    """The thread the job's own thread was forked from."""
    spec: JobSpec = Field(default_factory=JobSpec)
    thread_id: str | None = None
    judge_thread_id: str | None = None
    final_message: str | None = None
    verdict: Verdict | None = None
    """The newest valid verdict of the judge."""
    error: JobError | None = None
    end_reason: str | None = None
    """Why the job ended, in a sentence."""
    due_message: str | None = None
    """What the next attempt will ask (in ``next_attempt_due``)."""
    submitted_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    duration: float | None = None
    """Seconds from the start of the first turn (or the submission, if it never started) to the end."""
    usage: TokenUsage | None = None
    """Tokens of every turn of the job together (attempts and judge)."""
    cancel_requested: bool = False
    attempts: list[JobAttempt] = Field(default_factory=list)
    events: list[JobEvent] | None = Field(default=None)
    """The job's entries, on request only."""

    @property
    def done(self) -> bool:
        """The job is over (succeeded, failed, cancelled or timed out)."""
        return self.state in TERMINAL

    @property
    def current(self) -> JobAttempt:
        """The newest attempt."""
        return self.attempts[-1]

    @property
    def continuations(self) -> int:
        """How many times the job was continued after a death."""
        return sum(1 for attempt in self.attempts if attempt.kind == "continuation")

    @property
    def tries(self) -> int:
        """Attempts that count against ``max_attempts`` (continuations do not)."""
        return len(self.attempts) - self.continuations

    def next_thought_id(self) -> str | None:
        """The id of the thought the runner writes next in the job's conversation (``None`` if none is due)."""
        number = len(self.attempts) + 1
        if self.phase is JobPhase.CONTINUATION_DUE:
            return continuation_id(self.id, number)
        if self.phase is JobPhase.NEXT_ATTEMPT_DUE:
            return attempt_id(self.id, number)
        return None

    def next_judge_id(self) -> str:
        """The id of the judge's next thought for the current attempt."""
        return judge_id(self.id, self.current.number, len(self.current.judge) + 1)


def add_usage(total: TokenUsage | None, more: TokenUsage | None) -> TokenUsage | None:
    """``total`` plus ``more`` (a count neither gives stays ``None``)."""
    if more is None:
        return total
    if total is None:
        return more.model_copy()
    fields = ("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens", "total_tokens")
    summed: dict[str, int | None] = {}
    for name in fields:
        a, b = getattr(total, name), getattr(more, name)
        summed[name] = None if a is None and b is None else (a or 0) + (b or 0)
    return TokenUsage(**summed)


def spec_of(entry: ThoughtEntry) -> JobSpec:
    """The job spec a submitting thought carries (the defaults when it carries none or a bad one:
    the client checked it before writing)."""
    raw = entry.job if isinstance(entry, JobThought) else (entry.model_extra or {}).get(SPEC_FIELD)
    if raw is None:
        return JobSpec()
    if isinstance(raw, JobSpec):
        return raw
    try:
        return JobSpec.model_validate(raw)
    except ValidationError:
        return JobSpec(continue_after_restart=False)


def _job_of(conversation: str) -> tuple[str, bool] | None:
    """(job id, whether it is the judge's conversation) for a conversation of a job, else ``None``."""
    if not conversation.startswith(JOB_PREFIX):
        return None
    rest = conversation[len(JOB_PREFIX) :]
    if rest.endswith(JUDGE_SUFFIX):
        return rest[: -len(JUDGE_SUFFIX)], True
    return rest, False


class JobFolder:
    """Folds journal entries, in order, into the records of the jobs they belong to."""

    def __init__(self, *, events: bool = False, only: str | None = None) -> None:
        self.jobs: dict[str, JobRecord] = {}
        """Every job seen, in submission order."""
        self._events = events
        self._only = only

    def feed(self, entry: BaseEntry) -> JobRecord | None:
        """Take the next entry of the journal; the record it changed (or may have), else ``None``."""
        found = _job_of(entry.conversation)
        if found is None or (self._only is not None and found[0] != self._only):
            return None
        job_id, judging = found
        job = self.jobs.get(job_id)
        if entry.sender != CODEX_SENDER:
            return self._client_entry(job_id, job, entry, judging=judging)
        if job is None:
            return None
        if judging:
            self._judge_entry(job, entry)
        else:
            self._job_entry(job, entry)
        return job

    # -- what the submitter and the runner write ----------------------------------------------------
    def _client_entry(self, job_id: str, job: JobRecord | None, entry: BaseEntry, *, judging: bool) -> JobRecord | None:
        if isinstance(entry, ThoughtEntry) and entry.id is not None:
            if judging:
                if job is not None and job.phase is JobPhase.JUDGE_DUE and entry.id == job.next_judge_id():
                    job.phase = JobPhase.JUDGING
                    job.current.judge.append(JudgeTry(thought_id=entry.id))
                return job
            if job is None and entry.id.startswith(RUNNER_THOUGHTS):
                return None  # (a job's later thought, its job unknown here: never a job of its own)
            if job is None:
                job = JobRecord(
                    id=job_id,
                    prompt=entry.text,
                    cwd=entry.cwd,
                    model=entry.model,
                    timeout=entry.timeout,
                    resume_thread=entry.resume_thread,
                    fork_thread=entry.fork_thread,
                    spec=spec_of(entry),
                    submitted_at=entry.ts,
                    attempts=[JobAttempt(number=1, kind="prompt", thought_id=entry.id, message=entry.text)],
                )
                self.jobs[job_id] = job
                return job
            if entry.id == job.next_thought_id():
                kind: AttemptKind = "continuation" if job.phase is JobPhase.CONTINUATION_DUE else job_feedback(job)
                job.attempts.append(
                    JobAttempt(number=len(job.attempts) + 1, kind=kind, thought_id=entry.id, message=entry.text)
                )
                job.phase = JobPhase.QUEUED
                job.due_message = None
                job.error = None
            return job
        if job is None or job.done:
            return job
        if isinstance(entry, CancelEntry) and not judging:
            job.cancel_requested = True
            if job.phase not in (JobPhase.QUEUED, JobPhase.RUNNING):  # no turn of its own to stop
                self._end(job, "cancelled", entry.ts, f"cancelled while {job.phase.value.replace('_', ' ')}")
        elif (
            isinstance(entry, StatusEntry)
            and entry.state == GATES_STATE
            and job.phase is JobPhase.CHECKING
            and entry.id == gates_id(job.id, job.current.number)
        ):
            self._gates(job, entry)
        return job

    def _gates(self, job: JobRecord, entry: StatusEntry) -> None:
        raw = entry.model_dump(mode="json").get("gates") or []  # (a GatesEntry, or a status read back)
        try:
            gates = [GateResult.model_validate(item) for item in raw]
        except ValidationError:
            gates = [GateResult(name="?", passed=False, ran=False, problem="the gate results were unreadable")]
        job.current.gates = gates
        unable = [gate for gate in gates if not gate.ran]
        failed = [gate for gate in gates if not gate.passed]
        if unable:
            job.error = JobError(
                code="CHECK_FAILED",
                message=f"the check {unable[0].name!r} could not run: {unable[0].problem}",
                hint="Fix the check command or the job's cwd, then submit the job again.",
            )
            self._end(job, "failed", entry.ts, f"a check could not run ({unable[0].name})")
        elif failed:
            self._retry(job, entry.ts, gate_feedback(failed), f"the check {failed[0].name!r} failed")
        elif job.spec.judge:
            job.phase = JobPhase.JUDGE_DUE
        else:
            self._end(job, "succeeded", entry.ts, f"attempt {job.current.number} passed every check")

    def _retry(self, job: JobRecord, at: datetime, message: str, why: str) -> None:
        """Another attempt with ``message`` if attempts are left, else the job failed."""
        if job.tries < job.spec.max_attempts:
            job.phase = JobPhase.NEXT_ATTEMPT_DUE
            job.due_message = message
            return
        job.error = JobError(
            code="ATTEMPTS_EXHAUSTED",
            message=f"{why} after {job.tries} attempt(s) (max_attempts {job.spec.max_attempts})",
            hint="Look at the attempts in the job's record; submit it again with more attempts or a clearer prompt.",
        )
        self._end(job, "failed", at, f"attempts exhausted: {why}")

    # -- what the daemon writes for the job's own turns ---------------------------------------------
    def _job_entry(self, job: JobRecord, entry: BaseEntry) -> None:
        if self._events and not isinstance(entry, DeltaEntry):
            job.events = [*(job.events or [])[-(MAX_EVENTS - 1) :], _event(entry)]
        thread = getattr(entry, "thread_id", None)
        if isinstance(thread, str) and job.thread_id is None:
            job.thread_id = thread
        attempt = job.current
        if job.done or getattr(entry, "in_reply_to", None) != attempt.thought_id:
            return
        if isinstance(entry, ResponseEntry):
            attempt.final_message = job.final_message = entry.text
        elif isinstance(entry, ErrorEntry) and not (entry.id or "").startswith(DUPLICATE_PREFIX):
            attempt.error = job.error = JobError(code=entry.code, message=entry.text, hint=entry.hint)
            if entry.code == REFUSED_CODE:
                attempt.outcome = "refused"
                self._end(job, "failed", entry.ts, "the daemon refused the job")
        elif isinstance(entry, StatusEntry):
            self._status(job, attempt, entry)

    def _status(self, job: JobRecord, attempt: JobAttempt, entry: StatusEntry) -> None:
        state = entry.state
        if state == TURN_STARTED:
            job.state, job.phase = "running", JobPhase.RUNNING
            job.started_at = job.started_at or entry.ts
            attempt.started_at = attempt.started_at or entry.ts
            return
        if state not in (TURN_COMPLETED, TURN_FAILED, TURN_ABORTED, THOUGHT_CANCELLED):
            return
        attempt.outcome, attempt.ended_at, attempt.usage = state, entry.ts, entry.usage
        job.usage = add_usage(job.usage, entry.usage)
        error = attempt.error
        timed_out = error is not None and error.code in TIMEOUT_CODES
        if state == THOUGHT_CANCELLED or (state == TURN_ABORTED and job.cancel_requested):
            self._end(job, "cancelled", entry.ts, "cancelled")
        elif state == TURN_COMPLETED and error is None:
            if job.spec.gated:
                job.phase = JobPhase.CHECKING
            elif job.spec.judge:
                job.phase = JobPhase.JUDGE_DUE
            else:
                self._end(job, "succeeded", entry.ts, f"attempt {attempt.number} completed")
        elif timed_out:
            self._end(job, "timed_out", entry.ts, "the turn ran out of time")
        elif state == TURN_ABORTED or (error is not None and error.code == ErrorCode.PROCESS_EXITED.value):
            self._cut_short(job, attempt, entry)
        else:
            self._end(job, "failed", entry.ts, "the turn failed")

    def _cut_short(self, job: JobRecord, attempt: JobAttempt, entry: StatusEntry) -> None:
        """The turn ended without finishing (the daemon or Codex died): continued once when allowed."""
        if attempt.error is None:
            attempt.error = JobError(
                code=ErrorCode.PROCESS_EXITED.value,
                message=f"the turn was cut short ({entry.text})",
                hint="The daemon or Codex stopped during the job; submit it again (with --resume THREAD_ID to "
                "continue where it was).",
            )
        if job.spec.continue_after_restart and job.continuations < MAX_CONTINUATIONS:
            job.phase = JobPhase.CONTINUATION_DUE
            job.error = None
            return
        job.error = attempt.error
        never = "the job may not be continued" if not job.spec.continue_after_restart else "it was continued once"
        self._end(job, "failed", entry.ts, f"the turn was cut short and {never}")

    # -- the judge's turns ---------------------------------------------------------------------------
    def _judge_entry(self, job: JobRecord, entry: BaseEntry) -> None:
        thread = getattr(entry, "thread_id", None)
        if isinstance(thread, str) and job.judge_thread_id is None:
            job.judge_thread_id = thread
        if job.done or job.phase is not JobPhase.JUDGING or not job.current.judge:
            return
        judge = job.current.judge[-1]
        if getattr(entry, "in_reply_to", None) != judge.thought_id:
            return
        if isinstance(entry, ResponseEntry):
            judge.answer = entry.text
        elif isinstance(entry, ErrorEntry):
            judge.problem = f"{entry.code}: {entry.text}"
        elif isinstance(entry, StatusEntry) and entry.state in (TURN_COMPLETED, TURN_FAILED, TURN_ABORTED):
            judge.usage = entry.usage
            job.usage = add_usage(job.usage, entry.usage)
            self._verdict(job, judge, entry)
        elif isinstance(entry, StatusEntry) and entry.state == THOUGHT_CANCELLED:
            judge.problem = "the judge's turn was cancelled"
            self._verdict(job, judge, entry)

    def _verdict(self, job: JobRecord, judge: JudgeTry, entry: StatusEntry) -> None:
        parsed: Verdict | str = (
            parse_verdict(judge.answer) if entry.state == TURN_COMPLETED and judge.problem is None else "no answer"
        )
        if isinstance(parsed, str):
            judge.problem = judge.problem or parsed
            if len(job.current.judge) < MAX_JUDGE_TRIES:
                job.phase = JobPhase.JUDGE_DUE
                return
            job.error = JobError(
                code="JUDGE_FAILED",
                message=f"the judge gave no valid verdict in {MAX_JUDGE_TRIES} tries ({cut(judge.problem, 120)})",
                hint="Look at the judge's answers in the job's record (attempts[].judge).",
            )
            self._end(job, "failed", entry.ts, "the judge gave no valid verdict")
            return
        judge.verdict = job.verdict = parsed
        if parsed.decision == "pass":
            self._end(job, "succeeded", entry.ts, f"the judge passed attempt {job.current.number}")
        else:
            self._retry(job, entry.ts, judge_feedback(parsed), "the judge's verdict was fail")

    def _end(self, job: JobRecord, state: JobState, at: datetime, reason: str) -> None:
        job.state, job.phase, job.ended_at, job.end_reason = state, JobPhase.ENDED, at, reason
        began = job.started_at or job.submitted_at
        if began is not None:
            job.duration = round(max(0.0, (at - began).total_seconds()), 3)


def job_feedback(job: JobRecord) -> AttemptKind:
    """Whether the attempt due now answers a gate or a verdict."""
    return "judge_feedback" if job.current.judge else "gate_feedback"


GATE_FEEDBACK_CHARS = 8000
"""At most this much of the failed gates' output goes into the next attempt's message."""


def gate_feedback(failed: list[GateResult]) -> str:
    """The next attempt's message after failed gates: which failed, and their (bounded) output."""
    parts = ["The work is not done yet: these checks failed after your last turn. Fix the cause, then stop."]
    share = GATE_FEEDBACK_CHARS // max(1, len(failed))
    for gate in failed:
        status = gate.problem or f"exit status {gate.exit_code}"
        output = gate.output if len(gate.output) <= share else "…" + gate.output[-share:]
        parts.append(f"\n$ {gate.name}\n({status})\n{output}".rstrip())
    return "\n".join(parts)


def judge_feedback(verdict: Verdict) -> str:
    """The next attempt's message after a failing verdict: its next prompt, and what is missing."""
    missing = "".join(f"\n- {item}" for item in verdict.missing)
    text = verdict.next_prompt.strip() or "A reviewer found the work incomplete; finish it."
    return f"{text}\n\nMissing:{missing}" if missing else text


def _event(entry: BaseEntry) -> JobEvent:
    return JobEvent(
        kind=entry.kind,
        ts=entry.ts,
        text=entry.text,
        state=getattr(entry, "state", None),
        tool=getattr(entry, "tool", None),
        code=getattr(entry, "code", None),
    )


async def read_jobs(journal: Journal, *, events: bool = False, only: str | None = None) -> JobFolder:
    """Every job in ``journal`` (or only the job ``only``), as the journal holds them now."""
    folder = JobFolder(events=events, only=only)
    for item in await journal.read():
        if isinstance(item, JournalRecord):
            folder.feed(item.entry)
    return folder
