"""A job's record, derived from the journal alone (docs/jobs.md).

A job is the conversation ``job:<id>``: the thought that submitted it (with its thread options),
then what the daemon wrote for it. Folding those entries in journal order gives the record:
``queued`` → ``running`` (the turn started) → ``succeeded`` / ``failed`` / ``cancelled`` /
``timed_out`` (the turn's end, or a ``thought_cancelled`` / ``REFUSED`` answer before it ran).
Nothing but the journal is read, through the :class:`~coven_codex.journal.Journal` protocol, so
any process on any backend derives the same record, and a daemon restart changes nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from coven_codex.agent.job_names import JOB_PREFIX, TURN_ABORTED, TURN_COMPLETED, TURN_FAILED, TURN_STARTED
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
from coven_codex.support.limits import REFUSED_CODE

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


def job_conversation(job_id: str) -> str:
    """The conversation a job lives in."""
    return f"{JOB_PREFIX}{job_id}"


class JobError(BaseModel):
    """Why a job failed: the daemon's classified error (docs/operations.md, error codes)."""

    code: str
    message: str
    hint: str = ""


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
    prompt: str = ""
    cwd: str | None = None
    model: str | None = None
    timeout: float | None = None
    resume_thread: str | None = None
    """The thread the job was started from (its history continued in a thread of the job's own)."""
    thread_id: str | None = None
    final_message: str | None = None
    error: JobError | None = None
    submitted_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    duration: float | None = None
    """Seconds from the start of the turn (or the submission, if it never started) to the end."""
    usage: TokenUsage | None = None
    cancel_requested: bool = False
    events: list[JobEvent] | None = Field(default=None)
    """The job's entries, on request only."""

    @property
    def done(self) -> bool:
        """The job is over (succeeded, failed, cancelled or timed out)."""
        return self.state in TERMINAL


class JobFolder:
    """Folds journal entries, in order, into the records of the jobs they belong to."""

    def __init__(self, *, events: bool = False, only: str | None = None) -> None:
        self.jobs: dict[str, JobRecord] = {}
        """Every job seen, in submission order."""
        self._thoughts: dict[str, str] = {}
        """Job id → the id of the thought that submitted it."""
        self._events = events
        self._only = job_conversation(only) if only is not None else None

    def feed(self, entry: BaseEntry) -> None:
        """Take the next entry of the journal."""
        conversation = entry.conversation
        if not conversation.startswith(JOB_PREFIX) or (self._only is not None and conversation != self._only):
            return
        job_id = conversation[len(JOB_PREFIX) :]
        job = self.jobs.get(job_id)
        if entry.sender != CODEX_SENDER:
            if isinstance(entry, ThoughtEntry) and job is None and entry.id is not None:
                self.jobs[job_id] = JobRecord(
                    id=job_id,
                    prompt=entry.text,
                    cwd=entry.cwd,
                    model=entry.model,
                    timeout=entry.timeout,
                    resume_thread=entry.resume_thread,
                    submitted_at=entry.ts,
                )
                self._thoughts[job_id] = entry.id
            elif isinstance(entry, CancelEntry) and job is not None and not job.done:
                job.cancel_requested = True
            return
        if job is None:
            return
        thought = self._thoughts[job_id]
        if self._events and not isinstance(entry, DeltaEntry):
            job.events = [*(job.events or [])[-(MAX_EVENTS - 1) :], _event(entry)]
        thread = getattr(entry, "thread_id", None)
        if isinstance(thread, str) and job.thread_id is None:
            job.thread_id = thread
        if job.done or getattr(entry, "in_reply_to", None) != thought:
            return
        if isinstance(entry, ResponseEntry):
            job.final_message = entry.text
        elif isinstance(entry, ErrorEntry):
            job.error = JobError(code=entry.code, message=entry.text, hint=entry.hint)
            if entry.code == REFUSED_CODE:
                self._end(job, "failed", entry.ts)
        elif isinstance(entry, StatusEntry):
            self._status(job, entry)

    def _status(self, job: JobRecord, entry: StatusEntry) -> None:
        if entry.state == TURN_STARTED:
            job.state = "running"
            job.started_at = job.started_at or entry.ts
        elif entry.state == TURN_COMPLETED:
            job.usage = entry.usage
            self._end(job, "failed" if job.error is not None else "succeeded", entry.ts)
        elif entry.state == TURN_FAILED:
            job.usage = entry.usage
            timed_out = job.error is not None and job.error.code in TIMEOUT_CODES
            self._end(job, "timed_out" if timed_out else "failed", entry.ts)
        elif entry.state == TURN_ABORTED:
            job.usage = entry.usage
            if job.cancel_requested:
                self._end(job, "cancelled", entry.ts)
            elif job.error is not None and job.error.code in TIMEOUT_CODES:
                self._end(job, "timed_out", entry.ts)  # (0.169 records the interrupted turn as aborted)
            else:
                if job.error is None:
                    job.error = JobError(
                        code=ErrorCode.PROCESS_EXITED.value,
                        message=f"the turn was cut short ({entry.text})",
                        hint="The daemon or Codex stopped during the job; submit it again (with --resume "
                        "THREAD_ID to continue where it was).",
                    )
                self._end(job, "failed", entry.ts)
        elif entry.state == THOUGHT_CANCELLED:
            self._end(job, "cancelled", entry.ts)

    @staticmethod
    def _end(job: JobRecord, state: JobState, at: datetime) -> None:
        job.state = state
        job.ended_at = at
        began = job.started_at or job.submitted_at
        if began is not None:
            job.duration = round(max(0.0, (at - began).total_seconds()), 3)


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
