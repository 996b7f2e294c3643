"""Jobs end to end (issue 15, items 1 and 2): the daemon as a real process, the real Codex 0.169.0
and the scripted model; jobs submitted and followed with ``coven-codex job`` (real processes)
and the journal client.

- submit, status while running, result; ``--wait --json`` prints the finished record;
- a job's ``cwd`` inside ``workspace_roots`` is where Codex works; one outside is refused;
- cancel of a running job interrupts its turn; cancel of a queued job means it never runs;
- a job's timeout ends it ``timed_out``;
- ``--resume THREAD`` and ``--continue-latest`` continue that very thread (the model sees its history,
  its rollout grows); ``--fork THREAD`` starts a new thread from its history; an unknown thread fails once;
- ``max_jobs`` queues jobs; ``kill -9`` of the daemon mid-job: every job ends exactly once.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_harness import AgentHarness, Daemon, make_responder, user_prompts

from coven_codex.agent.job_names import JOB_SENDER
from coven_codex.entries import StatusEntry, ThoughtEntry
from coven_codex.jobs.client import new_job_id, wait
from coven_codex.jobs.records import (
    CONTINUATION_TEXT,
    VERDICT_SCHEMA,
    JobRecord,
    Verdict,
    continuation_id,
    job_conversation,
    judge_conversation,
    read_jobs,
)
from coven_codex.rollout.locator import thread_id_from_path
from coven_codex.support.limits import MAX_THOUGHT_CHARS
from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.processes import codex_processes
from coven_codex.testing.request_log import RecordedRequest
from coven_codex.testing.responders import command_responder
from coven_codex.testing.steps import Reply, Stall

pytestmark = [pytest.mark.codex, pytest.mark.timeout(300)]

Factory = Callable[[Path, ScriptedModelServer], AgentHarness]
LONG_STALL = 600.0
"""A model answer that never comes within the test: only a cancel or a timeout ends such a job."""


@pytest.fixture
async def slow_server() -> ScriptedModelServer:
    """Echo, except that prompts starting with ``slow`` stall (the job runs until stopped)."""
    responder = make_responder({"slow": lambda r: (Stall(LONG_STALL), Reply("too late"))})
    async with ScriptedModelServer(responder=responder) as server:
        yield server  # type: ignore[misc]


async def started(h: AgentHarness, *args: str) -> Daemon:
    """Start the daemon and wait until it serves the journal. Codex's own stream-idle limit is
    raised past the test's length: a stalled job ends only by a cancel or its own timeout."""
    h.write_base_config(model_providers={"local": {"stream_idle_timeout_ms": 3_600_000}})
    daemon = await h.start(*args)
    await h.until_logged("ready (pid")
    return daemon


async def job(h: AgentHarness, *args: str) -> tuple[int, str, str]:
    """Run ``coven-codex job ARGS --journal J``; (exit code, stdout, stderr)."""
    action, *rest = args
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "coven_codex",
        "job",
        action,
        "--journal",
        str(h.journal_path),
        *rest,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=h.env,
    )
    out, err = await asyncio.wait_for(process.communicate(), 200)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def record(h: AgentHarness, job_id: str) -> JobRecord:
    return (await read_jobs(h.journal)).jobs[job_id]


async def until_state(h: AgentHarness, job_id: str, *states: str, timeout: float = 120.0) -> JobRecord:
    """Poll the job's record (derived from the journal) until it is in one of ``states``."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while (found := await record(h, job_id)).state not in states:
        if loop.time() > end:
            raise AssertionError(f"job {job_id} never reached {states}: {found!r}\n{h.daemons[-1].log()[-3000:]}")
        await asyncio.sleep(0.1)
    return found


def requests_with(server: ScriptedModelServer, prompt: str) -> list[RecordedRequest]:
    return [r for r in server.requests.responses_requests() if user_prompts(r) and user_prompts(r)[-1] == prompt]


async def test_submit_status_result_and_wait_json(
    codex_bin_169: Path, slow_server: ScriptedModelServer, harness_factory: Factory
) -> None:
    h = harness_factory(codex_bin_169, slow_server)
    daemon = await started(h)
    code, out, err = await job(h, "submit", "--prompt", "hello job", "--wait", "--json")
    assert code == 0, err
    finished = JobRecord.model_validate_json(out)
    assert finished.state == "succeeded" and finished.final_message == "echo: hello job"
    assert finished.thread_id and finished.duration is not None and finished.usage is not None
    assert finished.usage.total_tokens
    # a slow one: status while it runs, then cancelled; result and list agree with the journal
    code, out, _ = await job(h, "submit", "--prompt", "slow job")
    slow_id = out.strip()
    assert code == 0 and len(slow_id) == 16
    await until_state(h, slow_id, "running")
    code, out, _ = await job(h, "status", slow_id, "--json")
    assert code == 0 and json.loads(out)["state"] == "running"
    code, out, _ = await job(h, "list", "--state", "running")
    assert out.split()[0:2] == [slow_id, "running"]
    code, out, _ = await job(h, "result", slow_id)
    assert code == 3 and "still running" in out
    code, out, _ = await job(h, "cancel", slow_id)
    assert code == 0 and "cancel requested" in out
    cancelled = await wait(h.journal, slow_id, limit=60)
    assert cancelled.state == "cancelled" and cancelled.cancel_requested
    code, out, err = await job(h, "result", finished.id, "--events")
    assert code == 0 and out.strip().endswith("echo: hello job") and "[status/turn_completed]" in out
    code, out, err = await job(h, "status", "nope")
    assert code == 2 and "no job 'nope'" in err
    assert await h.stop(daemon) == 0
    assert len(requests_with(slow_server, "slow job")) == 1


async def test_a_jobs_cwd_inside_the_roots_is_where_codex_works_and_one_outside_is_refused(
    codex_bin_169: Path, model_server: ScriptedModelServer, harness_factory: Factory, tmp_path: Path
) -> None:
    root = tmp_path / "projects"
    project = root / "app"
    project.mkdir(parents=True)
    (root / "escape").symlink_to(tmp_path)  # inside by name, outside by its real path
    h = harness_factory(codex_bin_169, model_server)
    daemon = await started(h, "--workspace-root", str(root))
    code, out, err = await job(h, "submit", "--prompt", "where am i", "--cwd", str(project), "--wait", "--json")
    assert code == 0, err
    (request,) = requests_with(model_server, "where am i")
    assert f"<cwd>{project}</cwd>" in json.dumps(request.input_items())  # Codex's environment context
    assert JobRecord.model_validate_json(out).cwd == str(project)
    code, out, err = await job(h, "submit", "--prompt", "escape", "--cwd", str(root / "escape"), "--wait", "--json")
    refused = JobRecord.model_validate_json(out)
    assert code == 1 and refused.state == "failed" and refused.error is not None
    assert refused.error.code == "REFUSED" and "outside the workspace and every root" in refused.error.message
    assert "--workspace-root DIR" in refused.error.hint
    assert not requests_with(model_server, "escape")
    assert await h.stop(daemon) == 0


async def test_a_job_thought_over_codex_input_limit_ends_failed_and_its_wait_returns(
    codex_bin_169: Path, model_server: ScriptedModelServer, harness_factory: Factory
) -> None:
    # Before: the daemon's refusal named no thought (in_reply_to null): the job stayed queued
    # and waiting for it ran into the limit. A client that skips `submit`'s own check (another
    # program, an older coven-codex) writes the thought straight to the journal.
    h = harness_factory(codex_bin_169, model_server)
    daemon = await started(h)
    job_id = new_job_id()
    await h.append(
        ThoughtEntry(conversation=job_conversation(job_id), sender=JOB_SENDER, text="x" * (MAX_THOUGHT_CHARS + 1))
    )
    ended = await wait(h.journal, job_id, limit=90)
    assert ended.state == "failed" and ended.error is not None and ended.error.code == "REFUSED", ended
    assert f"Codex accepts at most {MAX_THOUGHT_CHARS}" in ended.error.message
    code, out, _ = await job(h, "status", job_id)
    assert code == 0 and out.startswith(f"{job_id} failed (REFUSED: "), out
    assert not model_server.requests.responses_requests()
    assert await h.stop(daemon) == 0


async def test_a_job_in_the_daemons_workspace_runs_without_workspace_roots(
    codex_bin_169: Path, model_server: ScriptedModelServer, harness_factory: Factory, tmp_path: Path
) -> None:
    h = harness_factory(codex_bin_169, model_server)
    project = h.workspace / "project"
    project.mkdir()
    daemon = await started(h)  # no --workspace-root
    code, out, err = await job(h, "submit", "--prompt", "in the workspace", "--cwd", str(project), "--wait", "--json")
    assert code == 0, err
    assert JobRecord.model_validate_json(out).state == "succeeded"
    (request,) = requests_with(model_server, "in the workspace")
    assert f"<cwd>{project.resolve()}</cwd>" in json.dumps(request.input_items())
    code, out, err = await job(h, "submit", "--prompt", "outside", "--cwd", str(tmp_path), "--wait", "--json")
    refused = JobRecord.model_validate_json(out)
    assert code == 1 and refused.error is not None and refused.error.code == "REFUSED"
    assert "--workspace-root DIR" in refused.error.hint
    assert await h.stop(daemon) == 0


async def test_a_jobs_timeout_ends_it_timed_out(
    codex_bin_169: Path, slow_server: ScriptedModelServer, harness_factory: Factory
) -> None:
    h = harness_factory(codex_bin_169, slow_server)
    daemon = await started(h)
    code, out, err = await job(h, "submit", "--prompt", "slow and limited", "--timeout", "2", "--wait", "--json")
    timed_out = JobRecord.model_validate_json(out)
    assert code == 1, err
    assert timed_out.state == "timed_out" and timed_out.timeout == 2, out
    assert timed_out.error is not None and timed_out.error.code in ("OUTER_TIMEOUT", "STREAM_IDLE")
    assert await h.stop(daemon) == 0


@pytest.mark.parametrize("prompt", ["/fail The model had an internal error", "/error 500 upstream exploded"])
async def test_a_job_whose_model_answered_an_error_ends_failed_not_timed_out(
    codex_bin_169: Path, harness_factory: Factory, prompt: str
) -> None:
    """Issue 26, item 13: a failed response or an HTTP 5xx is the provider's error, not a timeout."""
    async with ScriptedModelServer(responder=command_responder) as server:
        h = harness_factory(codex_bin_169, server)
        daemon = await started(h)
        code, out, err = await job(h, "submit", "--prompt", prompt, "--wait", "--json")
        record = JobRecord.model_validate_json(out)
        assert code == 1, err
        assert record.state == "failed", out
        assert record.error is not None and record.error.code == "PROVIDER_ERROR", out
        assert "model provider answered" in record.error.hint
        assert await h.stop(daemon) == 0


def rollouts(h: AgentHarness) -> dict[str, int]:
    """Every rollout file under the daemon's ``CODEX_HOME``, by thread id, with its number of lines."""
    found: dict[str, int] = {}
    for path in (h.codex_home / "sessions").rglob("rollout-*.jsonl"):
        thread = thread_id_from_path(path)
        assert thread is not None
        found[thread] = len(path.read_bytes().splitlines())
    return found


def turn_directories(h: AgentHarness, thread: str) -> list[str]:
    """The ``cwd`` of each ``turn_context`` of ``thread``'s rollout (where each turn ran)."""
    (path,) = (h.codex_home / "sessions").rglob(f"rollout-*-{thread}.jsonl")
    lines = [json.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
    return [line["payload"]["cwd"] for line in lines if line.get("type") == "turn_context"]


async def test_resume_continues_the_same_thread_and_fork_copies_it(
    codex_bin_169: Path, model_server: ScriptedModelServer, harness_factory: Factory
) -> None:
    """``--resume T`` runs the job in thread T itself (T's rollout grows by the new turn, no new
    rollout file; the model sees T's earlier turn), ``--continue-latest`` too; ``--fork T`` is a new
    thread whose history has T's turns, T untouched."""
    h = harness_factory(codex_bin_169, model_server)
    project = h.workspace / "project"
    project.mkdir(parents=True)
    daemon = await started(h)
    code, out, err = await job(h, "submit", "--prompt", "remember alpha", "--cwd", str(project), "--wait", "--json")
    assert code == 0, err
    first = JobRecord.model_validate_json(out)
    thread = first.thread_id
    assert thread is not None
    before = rollouts(h)
    assert list(before) == [thread]
    code, out, err = await job(h, "submit", "--prompt", "what came first", "--resume", thread, "--wait", "--json")
    assert code == 0, err
    second = JobRecord.model_validate_json(out)
    assert second.state == "succeeded" and second.thread_id == thread and second.resume_thread == thread
    after = rollouts(h)
    assert list(after) == [thread] and after[thread] > before[thread]  # the same file grew; none new
    (request,) = requests_with(model_server, "what came first")
    assert user_prompts(request) == ["remember alpha", "what came first"]
    code, out, err = await job(h, "submit", "--prompt", "and then", "--continue-latest", "--wait", "--json")
    assert code == 0, err
    third = JobRecord.model_validate_json(out)
    assert third.resume_thread == thread and third.thread_id == thread
    (request,) = requests_with(model_server, "and then")
    assert user_prompts(request) == ["remember alpha", "what came first", "and then"]
    assert list(rollouts(h)) == [thread]
    # Every turn of the thread ran in the directory it was started in (a take-over keeps it).
    assert turn_directories(h, thread) == [str(project.resolve())] * 3
    untouched = rollouts(h)[thread]
    code, out, err = await job(h, "submit", "--prompt", "a copy", "--fork", thread, "--wait", "--json")
    assert code == 0, err
    fourth = JobRecord.model_validate_json(out)
    assert fourth.fork_thread == thread and fourth.thread_id not in (None, thread)
    (request,) = requests_with(model_server, "a copy")
    assert user_prompts(request) == ["remember alpha", "what came first", "and then", "a copy"]
    assert sorted(rollouts(h)) == sorted([thread, str(fourth.thread_id)]) and rollouts(h)[thread] == untouched
    code, _, err = await job(h, "submit", "--prompt", "x", "--resume", thread, "--fork", thread)
    assert code == 2 and "not allowed with argument" in err
    assert await h.stop(daemon) == 0
    entries = await h.entries()
    # Each job's conversation shows its own turn only; the earlier jobs were told the thread moved on.
    responses = [(e.conversation, e.text) for e in entries if e.kind == "response"]
    assert responses == [
        (f"job:{first.id}", "echo: remember alpha"),
        (f"job:{second.id}", "echo: what came first"),
        (f"job:{third.id}", "echo: and then"),
        (f"job:{fourth.id}", "echo: a copy"),
    ]
    moved = [e.conversation for e in entries if isinstance(e, StatusEntry) and e.state == "thread_moved"]
    assert moved == [f"job:{first.id}", f"job:{second.id}"]


async def test_resume_of_a_thread_codex_does_not_know_fails_with_one_clear_error(
    codex_bin_169: Path, model_server: ScriptedModelServer, harness_factory: Factory
) -> None:
    """``--resume`` of a thread id Codex never had: the job fails with one ``REFUSED`` error saying
    so; nothing reaches the model and no thread is forked or started."""
    h = harness_factory(codex_bin_169, model_server)
    daemon = await started(h)
    unknown = "0199a0b0-0000-7000-8000-000000000000"
    code, out, err = await job(h, "submit", "--prompt", "lost", "--resume", unknown, "--wait", "--json")
    assert code == 1, err
    failed = JobRecord.model_validate_json(out)
    assert failed.state == "failed" and failed.thread_id is None
    assert failed.error is not None and failed.error.code == "REFUSED"
    assert f"Codex has no thread '{unknown}'" in failed.error.message and "/resume" in failed.error.hint
    assert not requests_with(model_server, "lost") and rollouts(h) == {}
    assert await h.stop(daemon) == 0
    errors = [e for e in await h.entries() if e.kind == "error"]
    assert len(errors) == 1


async def test_max_jobs_queues_and_kill9_mid_job_ends_every_job_once(
    codex_bin_169: Path, slow_server: ScriptedModelServer, harness_factory: Factory
) -> None:
    """With ``max_jobs = 1`` a second job stays queued behind a running one; the daemon is killed
    (``kill -9``) then. After the restart the running job (submitted with ``--no-continue``) ends
    once (its turn was cut short: failed, never run again), the queued one and a cancelled queued
    one are settled once: the queued one runs once and succeeds, the cancelled one never reaches
    the model."""
    h = harness_factory(codex_bin_169, slow_server)
    daemon = await started(h, "--max-jobs", "1")
    _, out, _ = await job(h, "submit", "--prompt", "slow first", "--no-continue")
    first = out.strip()
    await until_state(h, first, "running")
    _, out, _ = await job(h, "submit", "--prompt", "queued second")
    second = out.strip()
    _, out, _ = await job(h, "submit", "--prompt", "queued third")
    third = out.strip()
    await h.wait_for(
        lambda es: sum(1 for e in es if getattr(e, "state", "") == "session_waiting") == 2, what="two jobs waiting"
    )
    assert (await record(h, second)).state == "queued"
    code, out, _ = await job(h, "cancel", third)
    assert code == 0
    await until_state(h, third, "cancelled")
    await h.kill9(daemon)
    daemon = await started(h, "--max-jobs", "1")
    assert (await wait(h.journal, second, limit=120)).state == "succeeded"
    ended = await until_state(h, first, "failed")
    assert ended.error is not None
    assert await h.stop(daemon) == 0
    entries = await h.entries()
    for job_id in (first, second, third):
        ends = [
            e
            for e in entries
            if e.conversation == f"job:{job_id}"
            and getattr(e, "state", "") in ("turn_completed", "turn_failed", "turn_aborted", "thought_cancelled")
        ]
        assert len(ends) == 1, (job_id, ends)
    assert len(requests_with(slow_server, "slow first")) == 1
    assert len(requests_with(slow_server, "queued second")) == 1
    assert not requests_with(slow_server, "queued third")


async def test_cancel_of_a_running_job_ends_its_codex(
    codex_bin: Path, slow_server: ScriptedModelServer, harness_factory: Factory
) -> None:
    """On both drivers: the cancelled job's turn ends (``cancelled``) while the model is still
    stalling; with exec (0.47) the job's own Codex process is gone once the job is over."""
    h = harness_factory(codex_bin, slow_server)
    daemon = await started(h)
    _, out, _ = await job(h, "submit", "--prompt", "slow to cancel")
    slow_id = out.strip()
    await until_state(h, slow_id, "running")
    code, _, err = await job(h, "cancel", slow_id)
    assert code == 0, err
    cancelled = await wait(h.journal, slow_id, limit=60)
    assert cancelled.state == "cancelled" and cancelled.final_message is None
    if "0.47" in str(codex_bin):
        assert codex_processes(h.codex_home) == []  # exec: one process per turn, ended with it
    assert await h.stop(daemon) == 0


async def test_a_job_cut_short_by_kill9_continues_once_in_its_thread_and_succeeds(
    codex_bin_169: Path, harness_factory: Factory
) -> None:
    """``kill -9`` of the daemon while a job's turn runs: after the restart the job continues in the
    same Codex thread with one continuation message and ends ``succeeded``; its prompt was asked
    once, the continuation once; the record lists both attempts."""
    stalled = asyncio.Event()

    def stall_once(request: RecordedRequest) -> object:
        stalled.set()
        return (Stall(LONG_STALL), Reply("too late"))

    async with ScriptedModelServer(responder=make_responder({"slow": stall_once})) as server:
        h = harness_factory(codex_bin_169, server)
        daemon = await started(h)
        _, out, _ = await job(h, "submit", "--prompt", "slow and killed")
        job_id = out.strip()
        await until_state(h, job_id, "running")
        await asyncio.wait_for(stalled.wait(), 60)
        await h.kill9(daemon)
        daemon = await started(h)
        done = await wait(h.journal, job_id, limit=180)
        assert done.state == "succeeded", done
        assert [a.kind for a in done.attempts] == ["prompt", "continuation"]
        assert done.attempts[0].error is not None and done.attempts[0].error.code == "PROCESS_EXITED"
        assert done.final_message is not None and done.final_message.startswith("echo: Your previous turn")
        code, out, _ = await job(h, "status", job_id)
        assert code == 0 and f"{job_id} succeeded" in out and "attempts 2" in out
        assert await h.stop(daemon) == 0
        asked = server.requests.responses_requests()
        prompts = [user_prompts(r)[-1] for r in asked if user_prompts(r)]
        assert prompts.count("slow and killed") == 1 and prompts.count(CONTINUATION_TEXT) == 1
        (continued,) = [r for r in asked if user_prompts(r) and user_prompts(r)[-1] == CONTINUATION_TEXT]
        assert "slow and killed" in user_prompts(continued)  # the same thread: the prompt is in its history
        thoughts = [e.id for e in await h.entries() if e.kind == "thought" and e.conversation == f"job:{job_id}"]
        assert thoughts[1:] == [continuation_id(job_id, 2)]


async def test_a_check_that_fails_once_gets_a_second_attempt_in_the_same_thread(
    codex_bin_169: Path, model_server: ScriptedModelServer, harness_factory: Factory
) -> None:
    """``job submit --cwd <workspace> --check CMD --max-attempts 3 --wait --json`` where CMD fails
    once, then passes: two attempts in the job's thread, the second asked with the check's output;
    ``succeeded``, the record listing both with their gate results; its ``--notify`` conversation
    gets one summary."""
    h = harness_factory(codex_bin_169, model_server)
    daemon = await started(h)
    check = "test -e .checked-once || { touch .checked-once; echo 'lint: 1 problem'; exit 1; }"
    code, out, err = await job(
        h, "submit", "--prompt", "make it lint", "--cwd", str(h.workspace), "--check", check,
        "--max-attempts", "3", "--notify", "team", "--wait", "--json",
    )  # fmt: skip
    assert code == 0, err
    done = JobRecord.model_validate_json(out)
    assert done.state == "succeeded" and done.end_reason == "attempt 2 passed every check", out
    first, second = done.attempts
    assert first.gates is not None and not first.gates[0].passed and first.gates[0].exit_code == 1
    assert "lint: 1 problem" in first.gates[0].output
    assert second.kind == "gate_feedback" and second.gates is not None and second.gates[0].passed
    (request,) = [r for r in model_server.requests.responses_requests() if "lint: 1 problem" in str(user_prompts(r))]
    assert user_prompts(request)[0] == "make it lint"  # the same thread
    assert await h.stop(daemon) == 0
    # The notice: one reply in the chat conversation the job named, and nothing else there.
    (notice,) = [e for e in await h.entries() if e.conversation == "team"]
    assert notice.kind == "response" and notice.sender == "codex"
    assert notice.text.startswith(f"Job {done.id} succeeded after 2 attempts: attempt 2 passed every check.")
    assert "Final message:\necho: " in notice.text


async def test_a_judge_whose_first_verdict_fails_sends_its_next_prompt_and_passes_the_second(
    codex_bin_169: Path, harness_factory: Factory
) -> None:
    """``--judge``: the judge turn runs in a thread of its own with the verdict's schema as its output
    schema; a failing verdict's next prompt goes to the job's thread; the second verdict passes."""
    failing = Verdict(decision="fail", confidence=0.7, missing=["a README"], next_prompt="write the README too")
    passing = Verdict(decision="pass", confidence=0.95, missing=[], next_prompt="")
    verdicts = [failing, passing]

    def judge(request: RecordedRequest) -> object:
        return Reply(verdicts.pop(0).model_dump_json())

    async with ScriptedModelServer(responder=make_responder({"You are the reviewer": judge})) as server:
        h = harness_factory(codex_bin_169, server)
        daemon = await started(h)
        code, out, err = await job(h, "submit", "--prompt", "build it", "--judge", "--wait", "--json")
        assert code == 0, err
        done = JobRecord.model_validate_json(out)
        assert done.state == "succeeded" and done.verdict == passing, out
        assert [a.kind for a in done.attempts] == ["prompt", "judge_feedback"]
        assert [t.verdict for a in done.attempts for t in a.judge] == [failing, passing]
        assert done.attempts[1].message.startswith("write the README too")
        assert done.judge_thread_id not in (None, done.thread_id)
        assert await h.stop(daemon) == 0
        asked = server.requests.responses_requests()
        judged = [r for r in asked if user_prompts(r) and user_prompts(r)[-1].startswith("You are the reviewer")]
        assert len(judged) == 2
        schema = judged[0].json["text"]["format"]
        assert schema["type"] == "json_schema" and schema["schema"]["required"] == VERDICT_SCHEMA["required"]
        (again,) = [r for r in asked if user_prompts(r) and user_prompts(r)[-1].startswith("write the README too")]
        assert user_prompts(again)[0] == "build it"  # the job's own thread, not the judge's
        assert all(not any(p.startswith("You are") for p in user_prompts(r)) for r in [again])
        conversations = {e.conversation for e in await h.entries()}
        assert judge_conversation(done.id) in conversations
