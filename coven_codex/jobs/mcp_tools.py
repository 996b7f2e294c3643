"""The jobs as MCP tools: ``call_codex``, ``call_status``, ``call_jobs``, ``call_cancel`` (docs/jobs.md).

They are spells (:mod:`coven_codex.mcp`): their JSON Schemas come from the signatures, bad
arguments and refused requests are ``isError`` results, and the records are structured content.
``coven-codex mcp-serve`` serves them on stdio with the spell server's MCP session and connection.
Every tool is a journal client (:mod:`coven_codex.jobs.client`): the daemon on the same journal
runs the jobs.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Annotated

from pydantic import BaseModel, Field

from coven_codex.jobs.client import (
    DEFAULT_WAIT,
    MCP_WORDING,
    WAIT_SLACK,
    JobRequest,
    JobUsageError,
    cancel,
    find,
    make_spec,
    submit,
    wait,
)
from coven_codex.jobs.records import JobRecord, JobState, read_jobs
from coven_codex.journal import Journal
from coven_codex.mcp.context import SpellContext
from coven_codex.mcp.invoke import SpellError
from coven_codex.mcp.registry import SpellRegistry

TOOL_TIMEOUT = DEFAULT_WAIT + 2 * WAIT_SLACK
"""The longest a tool call may take (``call_codex`` with ``wait``)."""
PROGRESS_EVERY = 10.0
"""While ``call_codex`` waits, a progress notification at least this often (seconds), when the client
sent a progress token: clients that reset their request timeout on progress (the TypeScript SDK's
default is 60 s) never give up on a long job."""


async def wait_reporting(journal: Journal, job_id: str, context: SpellContext) -> JobRecord:
    """:func:`wait` for the job, telling the client its state as it changes and every
    :data:`PROGRESS_EVERY` seconds (progress: seconds waited; nothing is sent without a token)."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    state = ["queued"]

    def report(record: JobRecord | None = None) -> None:
        if record is not None:
            state[0] = record.state
        elapsed = loop.time() - began
        context.report_progress(round(elapsed, 3), None, f"job {job_id} {state[0]} ({elapsed:.0f} s)")

    async def beat() -> None:
        while True:
            await asyncio.sleep(PROGRESS_EVERY)
            report()

    async with asyncio.TaskGroup() as group:
        heart = group.create_task(beat())
        try:
            return await wait(journal, job_id, on_state=report, wording=MCP_WORDING)
        finally:
            heart.cancel()


class JobList(BaseModel):
    """The jobs ``call_jobs`` found, oldest first."""

    jobs: list[JobRecord]


def job_tools(journal: Journal) -> SpellRegistry:
    """The four job tools, talking to the daemon through ``journal``."""
    registry = SpellRegistry(default_timeout=TOOL_TIMEOUT, noun="tool")

    async def call_codex(
        prompt: Annotated[str, Field(min_length=1, description="What Codex is asked to do.")],
        *,
        cwd: Annotated[
            str | None,
            Field(description="Absolute directory Codex works in (inside the daemon's workspace or workspace_roots)."),
        ] = None,
        model: Annotated[str | None, Field(description="The model (default: Codex's configured one).")] = None,
        resume_session_id: Annotated[
            str | None, Field(description="A Codex thread id the job continues (that very thread).")
        ] = None,
        fork_session_id: Annotated[
            str | None, Field(description="A Codex thread id whose history a new thread of the job starts from.")
        ] = None,
        continue_latest: Annotated[
            bool, Field(description="Continue the thread of the newest job in the same cwd.")
        ] = False,
        timeout: Annotated[  # noqa: ASYNC109 (the job's timeout, an argument of the tool; not this call's)
            float,
            Field(
                ge=0, description="Seconds the job may run (at most the daemon's turn_timeout); 0: no limit of its own."
            ),
        ] = 0,
        continue_after_restart: Annotated[
            bool,
            Field(
                description="Continue the job once in its thread if a daemon or Codex death cuts its turn short "
                "(false: it fails instead)."
            ),
        ] = True,
        checks: Annotated[
            list[str],
            Field(description="Shell commands run in cwd after each attempt; exit status 0 passes."),
        ] = [],  # noqa: B006 (a schema default; pydantic copies it per call)
        require_diff: Annotated[bool, Field(description="A gate: the git work tree must have changes.")] = False,
        no_conflict_markers: Annotated[
            bool, Field(description="A gate: no file may hold a merge conflict marker.")
        ] = False,
        judge: Annotated[
            bool, Field(description="After the gates pass, a judge turn in its own thread gives a JSON verdict.")
        ] = False,
        max_attempts: Annotated[
            int, Field(ge=1, le=20, description="Attempts at most: the prompt, then one per failed gate or verdict.")
        ] = 3,
        check_timeout: Annotated[float, Field(gt=0, le=3600, description="Seconds each check may run.")] = 600,
        notify: Annotated[
            str | None, Field(description="A chat conversation told of the job's success or hard failure.")
        ] = None,
        wait_for_result: Annotated[
            bool,
            Field(
                description="Wait until the job is over and return its record (else return at once); with a "
                "progressToken, progress is notified while it waits."
            ),
        ] = False,
        context: SpellContext | None = None,
    ) -> JobRecord:
        """Start a Codex job; returns its record at once (state queued) with the job id, or the finished
        record when wait_for_result is true. Poll it with call_status."""
        request = JobRequest(
            prompt=prompt,
            cwd=cwd,
            model=model,
            resume_thread=resume_session_id,
            fork_thread=fork_session_id,
            continue_latest=continue_latest,
            timeout=timeout or None,
        )
        try:
            request = replace(
                request,
                spec=make_spec(
                    MCP_WORDING,
                    continue_after_restart=continue_after_restart,
                    checks=checks,
                    require_diff=require_diff,
                    no_conflict_markers=no_conflict_markers,
                    judge=judge,
                    max_attempts=max_attempts,
                    check_timeout=check_timeout,
                    notify=notify,
                ),
            )
            job_id = await submit(journal, request, MCP_WORDING)
            if wait_for_result and context is not None:
                return await wait_reporting(journal, job_id, context)
            return await find(journal, job_id, wording=MCP_WORDING)
        except JobUsageError as exc:
            raise SpellError(str(exc)) from None

    async def call_status(
        job_id: Annotated[str, Field(min_length=1, description="The id call_codex returned.")],
    ) -> JobRecord:
        """A job's record: state (queued, running, succeeded, failed, cancelled, timed_out), thread id,
        final message, error with hint, duration, token usage."""
        try:
            return await find(journal, job_id, wording=MCP_WORDING)
        except JobUsageError as exc:
            raise SpellError(str(exc)) from None

    async def call_jobs(
        state: Annotated[JobState | None, Field(description="Only jobs in this state.")] = None,
    ) -> JobList:
        """Every job in the journal (or those in one state), oldest first."""
        jobs = (await read_jobs(journal)).jobs.values()
        return JobList(jobs=[job for job in jobs if state is None or job.state == state])

    async def call_cancel(
        job_id: Annotated[str, Field(min_length=1, description="The id call_codex returned.")],
    ) -> JobRecord:
        """Cancel a job: a running one is interrupted (its Codex stopped), a queued one never starts.
        Returns the record as it was when the cancel was asked."""
        try:
            return await cancel(journal, job_id, MCP_WORDING)
        except JobUsageError as exc:
            raise SpellError(str(exc)) from None

    for tool in (call_codex, call_status, call_jobs, call_cancel):
        registry.register(tool)
    return registry
