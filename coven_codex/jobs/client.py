"""Submitting, cancelling and waiting for jobs: a journal client (docs/jobs.md).

Submitting appends one ``thought`` to the new conversation ``job:<id>`` carrying the job's thread
options; cancelling appends one ``cancel`` with ``queued`` to it. The daemon does the rest, with
its exactly-once delivery: a job survives a daemon restart and never runs twice. Waiting follows
the journal (no polling) until the job's record is terminal, bounded by a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from coven_codex.agent.job_names import JOB_SENDER
from coven_codex.entries import CancelEntry
from coven_codex.jobs.records import (
    JobFolder,
    JobRecord,
    JobSpec,
    JobState,
    JobThought,
    job_conversation,
    read_jobs,
)
from coven_codex.journal import FileJournal, Journal, JournalRecord
from coven_codex.support.limits import MAX_MODEL_CHARS, cut, over_limit

WAIT_SLACK = 120.0
"""Waiting for a job with a timeout gives up this long after the timeout could have ended it."""
DEFAULT_WAIT = 3600.0
"""Waiting for a job without a timeout gives up after this long (seconds)."""


class JobUsageError(ValueError):
    """A job request the user must fix (unknown job, nothing to continue, ...); the message says how."""


@dataclass(frozen=True, slots=True)
class Wording:
    """How a client names a job's options in the messages it shows (CLI flags or MCP arguments)."""

    prompt: str
    resume: str
    fork: str
    continue_latest: str
    timeout: str
    list_jobs: str


CLI_WORDING = Wording(
    prompt="--prompt TEXT",
    resume="--resume THREAD_ID",
    fork="--fork THREAD_ID",
    continue_latest="--continue-latest",
    timeout="--timeout",
    list_jobs="`coven-codex job list`",
)
MCP_WORDING = Wording(
    prompt="prompt",
    resume="resume_session_id",
    fork="fork_session_id",
    continue_latest="continue_latest",
    timeout="timeout",
    list_jobs="call_jobs",
)


@dataclass(frozen=True, slots=True)
class JobRequest:
    """What to run: the prompt and the options of the job's thread."""

    prompt: str
    cwd: str | None = None
    model: str | None = None
    resume_thread: str | None = None
    """Continue this very thread (the job's conversation takes it over)."""
    fork_thread: str | None = None
    """Start a new thread from this thread's history."""
    continue_latest: bool = False
    timeout: float | None = None
    spec: JobSpec = field(default_factory=JobSpec)
    """The job's loop: continuation after a death, checks, judge, attempts, notice (docs/jobs.md)."""


SPEC_FLAGS = {
    "continue_after_restart": ("--no-continue", "continue_after_restart"),
    "checks": ("--check CMD", "checks"),
    "require_diff": ("--require-diff", "require_diff"),
    "no_conflict_markers": ("--no-conflict-markers", "no_conflict_markers"),
    "judge": ("--judge", "judge"),
    "max_attempts": ("--max-attempts N", "max_attempts"),
    "check_timeout": ("--check-timeout S", "check_timeout"),
    "notify": ("--notify CONVERSATION", "notify"),
}
"""How each field of a job's spec is named on the command line and as an MCP argument."""


def make_spec(wording: Wording, **fields: object) -> JobSpec:
    """The job's :class:`JobSpec` from the options as given; :class:`JobUsageError` naming the
    option (as ``wording`` does) when one is out of bounds."""
    try:
        spec = JobSpec.model_validate(fields)
    except ValidationError as exc:
        problem = exc.errors()[0]
        name = str(problem["loc"][0]) if problem["loc"] else ""
        cli, mcp = SPEC_FLAGS.get(name, (name, name))
        raise JobUsageError(f"{cli if wording is CLI_WORDING else mcp}: {problem['msg']}") from None
    for command in spec.checks:
        if not command.strip():
            raise JobUsageError("a check command is empty; give the shell command to run")
    return spec


def new_job_id() -> str:
    """A fresh job id (16 hex digits)."""
    return uuid.uuid4().hex[:16]


def open_journal(where: str | Path) -> Journal:
    """The journal a jobs client talks through (today a file journal at the path ``where``)."""
    return FileJournal(Path(where))


def check_journal(where: Path) -> None:
    """A journal no daemon has created cannot serve jobs: :class:`JobUsageError` saying what to do."""
    if not where.exists():
        raise JobUsageError(
            f"the journal {where} does not exist, so no daemon serves it; start `coven-codex run --journal {where}`"
        )


async def submit(journal: Journal, request: JobRequest, wording: Wording = CLI_WORDING) -> str:
    """Queue a job; returns its id at once (the daemon runs it when a job slot is free). Refusals name
    the options as ``wording`` does."""
    if not request.prompt.strip():
        raise JobUsageError(f"the prompt is empty; pass {wording.prompt}")
    given = [
        name
        for name, value in (
            (wording.resume, request.resume_thread is not None),
            (wording.fork, request.fork_thread is not None),
            (wording.continue_latest, request.continue_latest),
        )
        if value
    ]
    if len(given) > 1:
        raise JobUsageError(f"give {' or '.join(given)}, not {'both' if len(given) == 2 else 'several'}")
    if request.timeout is not None and not request.timeout > 0:
        raise JobUsageError(f"{wording.timeout} must be a positive number of seconds")
    job_id = new_job_id()
    check_limits(request, job_conversation(job_id))
    cwd = _absolute(request.cwd)
    resume = request.resume_thread
    if request.continue_latest:
        resume = await latest_thread(journal, cwd, wording)
    await journal.append(
        JobThought(
            conversation=job_conversation(job_id),
            text=request.prompt,
            cwd=cwd,
            model=request.model,
            resume_thread=resume,
            fork_thread=request.fork_thread,
            timeout=request.timeout,
            job=request.spec,
        )
    )
    return job_id


def check_limits(request: JobRequest, conversation: str) -> None:
    """:class:`JobUsageError` for a request the daemon would refuse by its length alone
    (docs/journal-protocol.md, *Limits* and *Thread options*), before anything is written: the
    daemon's refusal would end the job ``failed`` at once, this says so to whoever submits it."""
    breach = over_limit(conversation, None, request.prompt)
    if breach is not None:
        raise JobUsageError(
            f"the prompt is {breach.length} characters long and Codex accepts at most {breach.limit}; "
            "shorten it or split it into several jobs"
        )
    if request.model is not None and not 0 < len(request.model) <= MAX_MODEL_CHARS:
        raise JobUsageError(f"the model name must be 1 to {MAX_MODEL_CHARS} characters long")
    for thread in (request.resume_thread, request.fork_thread):
        if thread is not None and not 0 < len(thread) <= MAX_MODEL_CHARS:
            raise JobUsageError(
                f"{cut(thread, 40)!r} is not a Codex thread id (1 to {MAX_MODEL_CHARS} characters); "
                "pass the thread_id a job's record shows"
            )


def _absolute(cwd: str | None) -> str | None:
    """``cwd`` made absolute (the daemon resolves its links and checks it against its workspace_roots)."""
    return os.path.abspath(cwd) if cwd is not None else None


async def latest_thread(journal: Journal, cwd: str | None, wording: Wording = CLI_WORDING) -> str:
    """The Codex thread of the newest job (in ``cwd``) that has one: what ``--continue-latest`` continues."""
    jobs = (await read_jobs(journal)).jobs.values()
    for job in reversed(list(jobs)):
        if job.thread_id is not None and job.cwd == cwd:
            return job.thread_id
    where = f" in {cwd}" if cwd is not None else ""
    raise JobUsageError(
        f"no earlier job{where} has a Codex thread to continue; submit one without {wording.continue_latest}"
    )


async def find(journal: Journal, job_id: str, *, events: bool = False, wording: Wording = CLI_WORDING) -> JobRecord:
    """The record of job ``job_id``; :class:`JobUsageError` if the journal holds no such job."""
    job = (await read_jobs(journal, events=events, only=job_id)).jobs.get(job_id)
    if job is None:
        raise JobUsageError(f"no job {job_id[:40]!r} in this journal; {wording.list_jobs} shows the jobs")
    return job


async def cancel(journal: Journal, job_id: str, wording: Wording = CLI_WORDING) -> JobRecord:
    """Ask the daemon to cancel a job (a running turn is interrupted, a queued one never starts).

    Returns the record as it was; a job already over is left alone.
    """
    job = await find(journal, job_id, wording=wording)
    if not job.done:
        await journal.append(CancelEntry(conversation=job_conversation(job_id), sender=JOB_SENDER, queued=True))
    return job


def wait_limit(job: JobRecord) -> float:
    """How long waiting for ``job`` may take: its timeout plus slack, else :data:`DEFAULT_WAIT`."""
    return job.timeout + WAIT_SLACK if job.timeout is not None else DEFAULT_WAIT


async def wait(
    journal: Journal,
    job_id: str,
    *,
    limit: float | None = None,
    events: bool = False,
    on_state: Callable[[JobRecord], None] | None = None,
    wording: Wording = CLI_WORDING,
) -> JobRecord:
    """Follow the journal until job ``job_id`` is over, at most ``limit`` seconds (default
    :func:`wait_limit`); returns the record then, terminal or not (the caller says which).
    ``on_state`` is told the record each time its state changes (first: the state it has now)."""
    job = await find(journal, job_id, wording=wording)
    if job.done and not events:
        return job
    folder = JobFolder(events=events, only=job_id)
    seen: JobState | None = None
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(wait_limit(job) if limit is None else limit):
            async for item in journal.tail():  # from the start: what is there, then what comes
                if isinstance(item, JournalRecord):
                    folder.feed(item.entry)
                    current = folder.jobs.get(job_id)
                    if current is None:
                        continue
                    if on_state is not None and current.state != seen:
                        seen = current.state
                        on_state(current)
                    if current.done:
                        return current
    return folder.jobs.get(job_id) or job
