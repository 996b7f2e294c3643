"""A job's record is derived from the journal's entries alone (docs/jobs.md): every way a job ends."""

from __future__ import annotations

import pytest

from coven_codex.agent.ingress import refuse_thought
from coven_codex.agent.thread_options import MAX_MODEL_CHARS
from coven_codex.entries import (
    CODEX_SENDER,
    BaseEntry,
    CancelEntry,
    ErrorEntry,
    ResponseEntry,
    StatusEntry,
    ThoughtEntry,
    TokenUsage,
)
from coven_codex.jobs.client import JobRequest, JobUsageError, cancel, find, latest_thread, submit
from coven_codex.jobs.records import JobFolder, read_jobs
from coven_codex.journal import MemoryJournal
from coven_codex.support.limits import MAX_ID_CHARS, MAX_THOUGHT_CHARS

C = "job:j1"


def submitted(**options: object) -> ThoughtEntry:
    return ThoughtEntry(id="t1", conversation=C, sender="jobs", text="do it", **options)  # type: ignore[arg-type]


def status(state: str, **fields: object) -> StatusEntry:
    return StatusEntry(conversation=C, state=state, in_reply_to="t1", **fields)  # type: ignore[arg-type]


def error(code: str) -> ErrorEntry:
    return ErrorEntry(conversation=C, code=code, text=f"{code} happened", hint="do this", in_reply_to="t1")


def fold(*entries: BaseEntry) -> JobFolder:
    folder = JobFolder(events=True)
    for entry in entries:
        folder.feed(entry)
    return folder


def test_a_job_goes_queued_running_succeeded() -> None:
    folder = fold(submitted(cwd="/p", timeout=5))
    job = folder.jobs["j1"]
    assert job.state == "queued" and job.cwd == "/p" and job.timeout == 5
    folder.feed(StatusEntry(conversation=C, state="session_started", thread_id="th"))
    folder.feed(status("turn_started"))
    assert job.state == "running" and job.thread_id == "th"
    folder.feed(ResponseEntry(conversation=C, text="first", in_reply_to="t1"))
    folder.feed(ResponseEntry(conversation=C, text="last", in_reply_to="t1"))
    folder.feed(status("turn_completed", usage=TokenUsage(total_tokens=7)))
    assert job.state == "succeeded" and job.final_message == "last" and job.usage == TokenUsage(total_tokens=7)
    assert job.duration is not None and job.done
    assert [e.kind for e in job.events or []] == ["status", "status", "response", "response", "status"]
    folder.feed(ResponseEntry(conversation=C, text="after the end", in_reply_to="t1"))
    assert job.final_message == "last"  # a final state is never left


@pytest.mark.parametrize(
    ("entries", "state", "code"),
    [
        ([error("REFUSED")], "failed", "REFUSED"),
        ([status("thought_cancelled")], "cancelled", None),
        ([status("turn_started"), CancelEntry(conversation=C, queued=True), status("turn_aborted")], "cancelled", None),
        ([status("turn_started"), error("OUTER_TIMEOUT"), status("turn_aborted")], "timed_out", "OUTER_TIMEOUT"),
        ([status("turn_started"), error("STREAM_IDLE"), status("turn_failed")], "timed_out", "STREAM_IDLE"),
        ([status("turn_started"), error("AUTH"), status("turn_failed")], "failed", "AUTH"),
        ([status("turn_started"), status("turn_aborted", text="turn aborted")], "failed", "PROCESS_EXITED"),
    ],
)
def test_every_way_a_job_ends(entries: list[BaseEntry], state: str, code: str | None) -> None:
    job = fold(submitted(), *entries).jobs["j1"]
    assert job.state == state and job.done
    assert (job.error.code if job.error is not None else None) == code


def test_other_conversations_and_other_thoughts_do_not_count() -> None:
    folder = fold(
        submitted(),
        ThoughtEntry(conversation="chat", text="hello"),
        StatusEntry(conversation="chat", state="turn_completed"),
        ThoughtEntry(id="t2", conversation=C, text="a second thought in the job's conversation"),
        StatusEntry(conversation=C, state="turn_completed", in_reply_to="t2"),
    )
    assert list(folder.jobs) == ["j1"] and folder.jobs["j1"].state == "queued"


async def test_the_client_submits_cancels_and_finds_through_the_journal() -> None:
    journal = MemoryJournal()
    job_id = await submit(journal, JobRequest(prompt="hello", cwd="rel", timeout=3))
    (job,) = (await read_jobs(journal)).jobs.values()
    assert job.id == job_id and job.cwd is not None and job.cwd.endswith("/rel") and job.timeout == 3
    assert (await cancel(journal, job_id)).state == "queued"
    assert (await find(journal, job_id)).cancel_requested
    with pytest.raises(JobUsageError, match="no job"):
        await find(journal, "nope")
    with pytest.raises(JobUsageError, match="not both"):
        await submit(journal, JobRequest(prompt="x", resume_thread="t", continue_latest=True))
    with pytest.raises(JobUsageError, match="no earlier job"):
        await latest_thread(journal, None)
    await journal.append(StatusEntry(conversation=f"job:{job_id}", state="session_started", thread_id="th-1"))
    assert await latest_thread(journal, job.cwd) == "th-1"
    later = await submit(journal, JobRequest(prompt="go on", cwd="rel", continue_latest=True))
    assert (await find(journal, later)).resume_thread == "th-1"


def test_a_job_whose_prompt_ingress_refuses_ends_failed_on_the_refusal() -> None:
    # Before: the refusal of a prompt over Codex's input limit had no in_reply_to, so the job
    # stayed queued for ever (and `job submit --wait` waited an hour).
    thought = ThoughtEntry(id="t1", conversation=C, sender="jobs", text="x" * (MAX_THOUGHT_CHARS + 1))
    refusal = refuse_thought(thought, 7)
    assert refusal is not None and refusal.in_reply_to == "t1"
    job = fold(thought, refusal.model_copy(update={"sender": CODEX_SENDER})).jobs["j1"]
    assert job.state == "failed" and job.error is not None and job.error.code == "REFUSED"
    assert f"Codex accepts at most {MAX_THOUGHT_CHARS}" in job.error.message


def test_a_refusal_of_an_over_long_id_names_no_thought() -> None:
    thought = ThoughtEntry(id="i" * (MAX_ID_CHARS + 1), conversation=C, text="hello")
    refusal = refuse_thought(thought, 3)
    assert refusal is not None and refusal.in_reply_to is None and "its id is" in refusal.text


@pytest.mark.parametrize(
    ("request_", "says"),
    [
        (JobRequest(prompt="x" * (MAX_THOUGHT_CHARS + 1)), f"Codex accepts at most {MAX_THOUGHT_CHARS}"),
        (JobRequest(prompt="hi", model="m" * (MAX_MODEL_CHARS + 1)), "model name must be 1 to"),
        (JobRequest(prompt="hi", resume_thread=""), "is not a Codex thread id"),
    ],
)
async def test_submit_checks_the_documented_limits_before_it_writes(request_: JobRequest, says: str) -> None:
    # Before: submit wrote any prompt; the daemon then refused it and the job never ended.
    journal = MemoryJournal()
    with pytest.raises(JobUsageError, match=says):
        await submit(journal, request_)
    assert await journal.read() == []
    await submit(journal, JobRequest(prompt="x" * MAX_THOUGHT_CHARS))  # the limit itself is fine
    assert len(await journal.read()) == 1
