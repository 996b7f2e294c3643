"""A job's record is derived from the journal's entries alone (docs/jobs.md): every way a job ends."""

from __future__ import annotations

import pytest

from coven_codex.agent.ingress import refuse_thought
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
from coven_codex.jobs.client import (
    CLI_WORDING,
    MCP_WORDING,
    JobRequest,
    JobUsageError,
    cancel,
    find,
    latest_thread,
    make_spec,
    submit,
)
from coven_codex.jobs.mcp_tools import job_tools
from coven_codex.jobs.records import (
    CONTINUATION_TEXT,
    GateResult,
    GatesEntry,
    JobFolder,
    JobPhase,
    JobSpec,
    Verdict,
    attempt_id,
    continuation_id,
    gates_id,
    judge_id,
    read_jobs,
)
from coven_codex.journal import MemoryJournal
from coven_codex.mcp.context import SpellContext
from coven_codex.mcp.invoke import call_spell
from coven_codex.support.limits import MAX_ID_CHARS, MAX_MODEL_CHARS, MAX_THOUGHT_CHARS

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
    job = fold(submitted(job={"continue_after_restart": False}), *entries).jobs["j1"]
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


def reply(to: str, text: str, conversation: str = C) -> list[BaseEntry]:
    """A completed turn answering thought ``to`` with ``text``."""
    return [
        StatusEntry(conversation=conversation, state="turn_started", in_reply_to=to),
        ResponseEntry(conversation=conversation, text=text, in_reply_to=to),
        StatusEntry(
            conversation=conversation, state="turn_completed", in_reply_to=to, usage=TokenUsage(total_tokens=5)
        ),
    ]


def gates(attempt: int, *results: GateResult) -> GatesEntry:
    return GatesEntry(id=gates_id("j1", attempt), conversation=C, gates=list(results))


def test_a_job_cut_short_waits_for_one_continuation_then_a_second_cut_fails_it() -> None:
    folder = fold(submitted(), status("turn_started"), status("turn_aborted", text="turn aborted"))
    job = folder.jobs["j1"]
    assert job.phase is JobPhase.CONTINUATION_DUE and not job.done
    assert job.next_thought_id() == continuation_id("j1", 2)
    folder.feed(ThoughtEntry(id=continuation_id("j1", 2), conversation=C, sender="jobs", text=CONTINUATION_TEXT))
    assert [a.kind for a in job.attempts] == ["prompt", "continuation"] and job.phase is JobPhase.QUEUED
    folder.feed(StatusEntry(conversation=C, state="turn_aborted", in_reply_to=continuation_id("j1", 2), text="x"))
    assert job.state == "failed" and job.error is not None and job.error.code == "PROCESS_EXITED"
    assert job.end_reason == "the turn was cut short and it was continued once"


def test_checks_that_fail_start_the_next_attempt_with_their_output_until_attempts_run_out() -> None:
    folder = fold(submitted(job={"checks": ["make test"], "max_attempts": 2}), *reply("t1", "done"))
    job = folder.jobs["j1"]
    assert job.phase is JobPhase.CHECKING and job.state == "running"
    folder.feed(gates(1, GateResult(name="make test", passed=False, exit_code=2, output="FAILED test_x")))
    assert job.phase is JobPhase.NEXT_ATTEMPT_DUE and job.due_message is not None
    assert "$ make test" in job.due_message and "FAILED test_x" in job.due_message
    second = attempt_id("j1", 2)
    folder.feed(ThoughtEntry(id=second, conversation=C, sender="jobs", text=job.due_message))
    folder.feed(gates(1, GateResult(name="make test", passed=True)))  # a stale id changes nothing
    for entry in reply(second, "fixed"):
        folder.feed(entry)
    folder.feed(gates(2, GateResult(name="make test", passed=False, exit_code=1)))
    assert job.state == "failed" and job.error is not None and job.error.code == "ATTEMPTS_EXHAUSTED"
    assert [a.kind for a in job.attempts] == ["prompt", "gate_feedback"] and job.usage == TokenUsage(total_tokens=10)
    assert [g.passed for a in job.attempts for g in a.gates or []] == [False, False]


def test_a_gate_that_cannot_run_is_a_hard_failure() -> None:
    folder = fold(submitted(job={"checks": ["x"]}), *reply("t1", "done"))
    folder.feed(gates(1, GateResult(name="cwd", passed=False, ran=False, problem="cwd '/gone' does not exist")))
    job = folder.jobs["j1"]
    assert job.state == "failed" and job.error is not None and job.error.code == "CHECK_FAILED"


def test_the_judge_is_asked_again_on_an_invalid_answer_and_its_failing_verdict_starts_the_next_attempt() -> None:
    judge = "job:j1:judge"
    folder = fold(submitted(job={"judge": True}), *reply("t1", "done"))
    job = folder.jobs["j1"]
    assert job.phase is JobPhase.JUDGE_DUE and job.next_judge_id() == judge_id("j1", 1, 1)
    folder.feed(ThoughtEntry(id=judge_id("j1", 1, 1), conversation=judge, sender="jobs", text="judge"))
    for entry in reply(judge_id("j1", 1, 1), "I think it is fine", judge):
        folder.feed(entry)
    assert job.phase is JobPhase.JUDGE_DUE and job.current.judge[0].problem is not None
    folder.feed(ThoughtEntry(id=judge_id("j1", 1, 2), conversation=judge, sender="jobs", text="judge"))
    failing = Verdict(decision="fail", confidence=0.8, missing=["tests"], next_prompt="add tests")
    for entry in reply(judge_id("j1", 1, 2), failing.model_dump_json(), judge):
        folder.feed(entry)
    assert job.phase is JobPhase.NEXT_ATTEMPT_DUE and job.due_message == "add tests\n\nMissing:\n- tests"
    folder.feed(ThoughtEntry(id=attempt_id("j1", 2), conversation=C, sender="jobs", text=job.due_message))
    for entry in reply(attempt_id("j1", 2), "tests added"):
        folder.feed(entry)
    folder.feed(ThoughtEntry(id=judge_id("j1", 2, 1), conversation=judge, sender="jobs", text="judge"))
    passing = Verdict(decision="pass", confidence=0.9, missing=[], next_prompt="")
    for entry in reply(judge_id("j1", 2, 1), passing.model_dump_json(), judge):
        folder.feed(entry)
    assert job.state == "succeeded" and job.verdict == passing and job.final_message == "tests added"
    assert job.end_reason == "the judge passed attempt 2" and [a.kind for a in job.attempts] == [
        "prompt",
        "judge_feedback",
    ]


def test_a_cancel_while_the_gates_run_ends_the_job_cancelled() -> None:
    folder = fold(submitted(job={"checks": ["sleep 100"]}), *reply("t1", "done"), CancelEntry(conversation=C))
    assert folder.jobs["j1"].state == "cancelled"


def test_the_client_writes_the_spec_and_names_a_bad_option_as_its_caller_does() -> None:
    with pytest.raises(JobUsageError, match="--max-attempts N"):
        make_spec(CLI_WORDING, max_attempts=0)
    with pytest.raises(JobUsageError, match=r"^max_attempts"):
        make_spec(MCP_WORDING, max_attempts=0)


def test_a_due_thought_written_twice_after_a_crash_does_not_fail_the_job() -> None:
    """The runner killed between writing a continuation and saving its record writes it again; the
    session drops the repeat with a ``duplicate-id@`` refusal that says nothing of the job's turn."""
    again = continuation_id("j1", 2)
    folder = fold(submitted(), status("turn_started"), status("turn_aborted", text="turn aborted"))
    folder.feed(ThoughtEntry(id=again, conversation=C, sender="jobs", text=CONTINUATION_TEXT))
    folder.feed(ThoughtEntry(id=again, conversation=C, sender="jobs", text=CONTINUATION_TEXT))
    folder.feed(ErrorEntry(id="duplicate-id@9", conversation=C, code="REFUSED", text="dropped", in_reply_to=again))
    job = folder.jobs["j1"]
    assert not job.done and len(job.attempts) == 2
    for entry in reply(again, "finished"):
        folder.feed(entry)
    assert job.state == "succeeded" and job.error is None


async def test_call_codex_takes_the_loop_s_arguments_as_the_command_line_does() -> None:
    """``call_codex``'s ``checks``, ``judge``, ``max_attempts``, ``notify`` and
    ``continue_after_restart`` become the same spec in the submitting thought as the flags; a bad
    value is an ``isError`` result naming the argument."""
    journal = MemoryJournal()
    tool = job_tools(journal).get("call_codex")
    assert tool is not None
    arguments = {
        "prompt": "fix it",
        "checks": ["make test"],
        "judge": True,
        "max_attempts": 4,
        "notify": "team",
        "continue_after_restart": False,
    }
    result = await call_spell(tool, arguments, SpellContext(spell_name="call_codex"))
    assert not result.isError, result
    (job,) = (await read_jobs(journal)).jobs.values()
    assert job.spec == JobSpec(
        checks=["make test"], judge=True, max_attempts=4, notify="team", continue_after_restart=False
    )
    refused = await call_spell(tool, {"prompt": "x", "max_attempts": 0}, SpellContext(spell_name="call_codex"))
    assert refused.isError and "max_attempts" in str(refused.content)


def test_a_runner_thought_of_an_unknown_job_is_not_taken_for_a_job() -> None:
    folder = fold(ThoughtEntry(id=attempt_id("j1", 2), conversation=C, sender="jobs", text="go on"))
    assert folder.jobs == {}
