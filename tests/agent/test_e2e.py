"""End to end: ``coven-codex run`` as a subprocess, the real Codex CLI, the scripted model server."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from agent_harness import AgentHarness, make_responder, replies, user_prompts

from coven_codex.entries import ApprovalEntry, ApprovalRequestEntry, BaseEntry, CancelEntry, ErrorEntry
from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.processes import codex_processes
from coven_codex.testing.responders import command_responder
from coven_codex.testing.steps import CallTool, HttpError, Reply, Stall, escalated_command

pytestmark = [pytest.mark.codex, pytest.mark.timeout(240)]

Factory = Callable[[Path, ScriptedModelServer], AgentHarness]


def statuses(entries: list[BaseEntry], conversation: str, state: str) -> list[BaseEntry]:
    return [
        e
        for e in entries
        if e.kind == "status" and e.conversation == conversation and getattr(e, "state", None) == state
    ]


async def test_two_conversations_multi_turn(
    codex_bin: Path, model_server: ScriptedModelServer, harness_factory: Factory
) -> None:
    h = harness_factory(codex_bin, model_server)
    daemon = await h.start()
    for turn in range(3):
        await h.think("alpha", f"alpha question {turn}")
        await h.think("beta", f"beta question {turn}")
    expected_a = [f"echo: alpha question {t}" for t in range(3)]
    expected_b = [f"echo: beta question {t}" for t in range(3)]

    def all_turns_over(es: list[BaseEntry]) -> bool:
        return len(replies(es)) >= 6 and all(len(statuses(es, c, "turn_completed")) >= 3 for c in ("alpha", "beta"))

    await h.wait_for(all_turns_over, what="six replies and six turn ends")
    assert await h.stop(daemon) == 0
    entries = await h.entries()
    assert replies(entries, "alpha") == expected_a
    assert replies(entries, "beta") == expected_b
    ids = [e.id for e in entries]
    assert len(ids) == len(set(ids))
    # Every turn ends with exactly one turn_completed status, whether the rollout records it (0.169)
    # or only the exec process's exit tells (0.47).
    for conversation in ("alpha", "beta"):
        assert len(statuses(entries, conversation, "turn_started")) == 3
        assert len(statuses(entries, conversation, "turn_completed")) == 3
    # Each conversation is one Codex thread whose history holds exactly its own thoughts.
    last_alpha = [r for r in model_server.requests.responses_requests() if "alpha question 2" in r.user_texts()]
    assert user_prompts(last_alpha[-1]) == [f"alpha question {t}" for t in range(3)]
    assert not codex_processes(h.codex_home)


async def test_thought_sent_mid_turn_is_queued(codex_bin: Path, harness_factory: Factory) -> None:
    responder = make_responder({"slow": lambda r: (Stall(2.0), Reply("slow done"))})
    async with ScriptedModelServer(responder=responder) as server:
        h = harness_factory(codex_bin, server)
        daemon = await h.start()
        await h.think("c", "slow first")
        await h.wait_for(lambda es: bool(statuses(es, "c", "turn_started")), what="turn start")
        await h.think("c", "second while busy")
        entries = await h.wait_for(lambda es: len(replies(es, "c")) >= 2, what="two replies")
        assert replies(entries, "c") == ["slow done", "echo: second while busy"]
        prompts = [user_prompts(r)[-1] for r in server.requests.responses_requests()]
        assert prompts == ["slow first", "second while busy"]
        assert await h.stop(daemon) == 0


async def test_cancel_stops_the_turn(codex_bin: Path, harness_factory: Factory) -> None:
    responder = make_responder({"forever": lambda r: (Stall(60.0), Reply("never"))})
    async with ScriptedModelServer(responder=responder) as server:
        h = harness_factory(codex_bin, server)
        daemon = await h.start()
        await h.think("c", "forever and ever")
        await server.requests.wait_for(1)
        await h.append(CancelEntry(conversation="c"))
        # The turn ends (0.169 records turn_aborted; 0.47's exec process is interrupted) and the
        # conversation goes on.
        await h.think("c", "after cancel")
        entries = await h.wait_for(lambda es: "echo: after cancel" in replies(es, "c"), what="reply after cancel")
        assert "never" not in replies(entries, "c")
        assert not [e.text for e in entries if isinstance(e, ErrorEntry)]  # a cancel is not an error
        assert await h.stop(daemon) == 0


async def test_model_401_becomes_auth_error(codex_bin: Path, harness_factory: Factory) -> None:
    async with ScriptedModelServer([HttpError(401, "Incorrect API key provided", times=10)]) as server:
        h = harness_factory(codex_bin, server)
        daemon = await h.start()
        await h.think("c", "hi")
        entries = await h.wait_for(
            lambda es: any(e.kind == "error" for e in es if e.conversation == "c"), what="an error entry"
        )
        await asyncio.sleep(1.5)  # a duplicate error would show up in this time
        entries = await h.entries()
        errors = [e for e in entries if isinstance(e, ErrorEntry) and e.conversation == "c"]
        assert [e.code for e in errors] == ["AUTH"], [e.text for e in errors]
        assert errors[0].hint and len(errors[0].text) <= 200
        assert await h.stop(daemon) == 0


async def test_approval_round_trip(codex_bin_169: Path, harness_factory: Factory, tmp_path: Path) -> None:
    script = [escalated_command("touch approved.txt", "create approved.txt"), Reply("command ran")]
    async with ScriptedModelServer(script, responder=lambda r: Reply("extra")) as server:
        h = harness_factory(codex_bin_169, server)
        h.write_base_config(approval_policy="on-request")
        daemon = await h.start()
        await h.think("c", "please touch the file")
        entries = await h.wait_for(
            lambda es: any(isinstance(e, ApprovalRequestEntry) for e in es), what="approval request"
        )
        request = next(e for e in entries if isinstance(e, ApprovalRequestEntry))
        assert request.conversation == "c" and "touch" in request.text
        await h.append(ApprovalEntry(conversation="c", request_id=request.request_id, decision="approve"))
        entries = await h.wait_for(lambda es: "command ran" in replies(es, "c"), what="reply after approval")
        assert (h.workspace / "approved.txt").exists()
        assert any(e.kind == "tool_result" for e in entries)
        assert await h.stop(daemon) == 0


async def test_killed_codex_becomes_error_and_session_resumes(codex_bin_169: Path, harness_factory: Factory) -> None:
    responder = make_responder({"slow": lambda r: (Stall(30.0), Reply("never"))})
    async with ScriptedModelServer(responder=responder) as server:
        h = harness_factory(codex_bin_169, server)
        daemon = await h.start()
        await h.think("c", "hello")
        await h.wait_for(lambda es: "echo: hello" in replies(es, "c"), what="first reply")
        await h.think("c", "slow one")
        await server.requests.wait_for(2)
        leaders = [p for p in codex_processes(h.codex_home) if _parent(p) == daemon.pid]
        assert leaders, "no Codex process found"
        for proc in leaders:  # the npm wrapper: the daemon must notice and end the native binary too
            with contextlib.suppress(psutil.Error):
                proc.kill()
        entries = await h.wait_for(lambda es: any(isinstance(e, ErrorEntry) for e in es), what="error entry")
        error = next(e for e in entries if isinstance(e, ErrorEntry))
        assert error.conversation == "c" and error.code == "PROCESS_EXITED"
        await h.wait_for(lambda es: len(statuses(es, "c", "session_resumed")) >= 1, what="session resumed")
        await h.think("c", "after the crash")
        entries = await h.wait_for(lambda es: "echo: after the crash" in replies(es, "c"), what="reply")
        thread_ids = {getattr(e, "thread_id", None) for e in entries if e.kind == "response"}
        assert len(thread_ids) == 1  # resumed, not a new thread
        last = server.requests.responses_requests()[-1]
        assert user_prompts(last)[0] == "hello"
        assert await h.stop(daemon) == 0


def _parent(proc: psutil.Process) -> int | None:
    try:
        return proc.ppid()
    except psutil.Error:
        return None


async def test_max_sessions_bound_waits_and_evicts_idle(
    codex_bin_169: Path, model_server: ScriptedModelServer, harness_factory: Factory
) -> None:
    h = harness_factory(codex_bin_169, model_server)
    daemon = await h.start("--max-sessions", "1")
    await h.think("one", "first of one")
    await h.wait_for(lambda es: "echo: first of one" in replies(es, "one"), what="reply in one")
    await h.think("two", "first of two")
    entries = await h.wait_for(lambda es: "echo: first of two" in replies(es, "two"), what="reply in two")
    # "two" had to wait for the slot "one" held (idle, so it was asked to give it back) and was told so.
    assert statuses(entries, "two", "session_waiting")
    assert not statuses(entries, "one", "session_waiting")
    # "one" let its thread go for "two", and says so, as an idle release does.
    entries = await h.wait_for(lambda es: statuses(es, "one", "session_ended"), what="one's session_ended")
    ended = statuses(entries, "one", "session_ended")
    assert len(ended) == 1 and "max_sessions = 1" in getattr(ended[0], "text", ""), ended
    await h.think("one", "second of one")
    await h.wait_for(lambda es: "echo: second of one" in replies(es, "one"), what="second reply in one")
    assert len([p for p in codex_processes(h.codex_home) if _parent(p) == daemon.pid]) <= 1
    assert await h.stop(daemon) == 0


async def test_an_idle_conversation_lets_its_thread_go_and_the_warm_codex_answers_its_next_thought(
    codex_bin_169: Path, model_server: ScriptedModelServer, harness_factory: Factory
) -> None:
    """Issue 12: ``release_thread_after`` seconds after its turn an idle conversation lets its
    thread go (``status: session_ended``), and the shared Codex process stays (warm, for
    ``idle_reap``): the next thought resumes the thread on that same process, history intact."""
    h = harness_factory(codex_bin_169, model_server)
    daemon = await h.start("--release-thread-after", "1")
    await h.think("c", "before the nap")
    await h.wait_for(lambda es: "echo: before the nap" in replies(es, "c"), what="first reply")
    (codex,) = [p.pid for p in codex_processes(h.codex_home) if _parent(p) == daemon.pid]
    await h.wait_for(lambda es: bool(statuses(es, "c", "session_ended")), what="the thread let go")
    assert [p.pid for p in codex_processes(h.codex_home) if _parent(p) == daemon.pid] == [codex]
    await h.think("c", "after the nap")
    entries = await h.wait_for(lambda es: "echo: after the nap" in replies(es, "c"), what="reply after the release")
    assert statuses(entries, "c", "session_resumed")
    assert [p.pid for p in codex_processes(h.codex_home) if _parent(p) == daemon.pid] == [codex]
    last = model_server.requests.responses_requests()[-1]
    assert user_prompts(last) == ["before the nap", "after the nap"]
    assert await h.stop(daemon) == 0


async def test_the_warm_codex_ends_after_idle_reap_with_no_thread(
    codex_bin_169: Path, model_server: ScriptedModelServer, harness_factory: Factory
) -> None:
    """Issue 12: once every thread is let go the shared Codex process is kept for ``idle_reap``
    seconds only, so an idle daemon ends with no Codex process; a later thought starts one."""
    h = harness_factory(codex_bin_169, model_server)
    daemon = await h.start("--release-thread-after", "0", "--idle-reap", "1")
    await h.think("c", "before the nap")
    await h.wait_for(lambda es: "echo: before the nap" in replies(es, "c"), what="first reply")
    await h.wait_for(lambda es: bool(statuses(es, "c", "session_ended")), what="the thread let go")
    deadline = asyncio.get_running_loop().time() + 60
    while [p for p in codex_processes(h.codex_home) if _parent(p) == daemon.pid]:
        assert asyncio.get_running_loop().time() < deadline, "the warm Codex never ended"
        await asyncio.sleep(0.1)
    await h.think("c", "after the nap")
    await h.wait_for(lambda es: "echo: after the nap" in replies(es, "c"), what="reply after the reaping")
    last = model_server.requests.responses_requests()[-1]
    assert user_prompts(last) == ["before the nap", "after the nap"]
    assert await h.stop(daemon) == 0


@pytest.mark.parametrize("version", ["0.169.0", "0.147.0"])
async def test_steer_adds_a_thought_to_the_running_turn(
    version: str, codex_of: Callable[[str], Path], harness_factory: Factory
) -> None:
    """Steering is offered where ``turn/steer`` takes ``clientUserMessageId`` (docs/rollout.md)."""
    responder = make_responder({"slow": lambda r: (Stall(2.0), Reply("slow done"))})
    async with ScriptedModelServer(responder=responder) as server:
        h = harness_factory(codex_of(version), server)
        daemon = await h.start("--mid-turn", "steer")
        await h.think("c", "slow first")
        await server.requests.wait_for(1)
        await h.think("c", "steered in")
        await h.wait_for(lambda es: len(statuses(es, "c", "turn_completed")) >= 1, what="turn completed")
        prompts = [user_prompts(r) for r in server.requests.responses_requests()]
        # The steered thought joined the running turn: a follow-up request of the same turn carries it.
        assert any(p[-1] == "steered in" for p in prompts), prompts
        assert len(statuses(await h.entries(), "c", "turn_started")) == 1
        assert await h.stop(daemon) == 0


async def test_stream_idle_timeout_abandons_the_turn(codex_bin_169: Path, harness_factory: Factory) -> None:
    responder = make_responder({"mute": lambda r: (Stall(40.0), Reply("too late"))})
    async with ScriptedModelServer(responder=responder) as server:
        h = harness_factory(codex_bin_169, server)
        daemon = await h.start("--stream-idle-timeout", "10")
        await h.think("c", "mute please")
        entries = await h.wait_for(
            lambda es: any(isinstance(e, ErrorEntry) for e in es), timeout=40, what="stream idle error"
        )
        error = next(e for e in entries if isinstance(e, ErrorEntry))
        assert error.code == "STREAM_IDLE" and error.conversation == "c"
        await h.think("c", "still there?")
        await h.wait_for(lambda es: "echo: still there?" in replies(es, "c"), what="reply after idle timeout")
        assert await h.stop(daemon) == 0


async def test_a_failed_model_response_is_a_provider_error_not_a_stream_idle(
    codex_bin_169: Path, harness_factory: Factory
) -> None:
    """Issue 26, item 13: the provider answered (``response.failed``, an HTTP 5xx): the chat is told
    so (``PROVIDER_ERROR``), not that the model went quiet, and the conversation goes on."""
    async with ScriptedModelServer(responder=command_responder) as server:
        h = harness_factory(codex_bin_169, server)
        daemon = await h.start()
        await h.think("failed", "/fail The model had an internal error")
        await h.think("http", "/error 503 upstream overloaded")

        def both_failed(es: list[BaseEntry]) -> bool:
            return all(statuses(es, c, "turn_failed") for c in ("failed", "http"))

        entries = await h.wait_for(both_failed, timeout=120, what="both turns failed")
        errors = {e.conversation: e for e in entries if isinstance(e, ErrorEntry)}
        assert errors["failed"].code == "PROVIDER_ERROR", errors["failed"]
        assert errors["failed"].text == "stream disconnected before completion: The model had an internal error"
        assert errors["http"].code == "PROVIDER_ERROR", errors["http"]
        assert "model provider answered" in errors["http"].hint
        assert [s.text for s in statuses(entries, "failed", "turn_failed")] == ["turn failed: PROVIDER_ERROR"]
        await h.think("failed", "still there?")
        await h.wait_for(lambda es: "echo: still there?" in replies(es, "failed"), what="reply after the failure")
        assert await h.stop(daemon) == 0


SPELLS_MODULE = '''
def shout(text: str) -> str:
    """Upper-case the text."""
    return text.upper() + "!"
'''


async def test_spells_reach_codex_through_the_daemon(codex_bin: Path, harness_factory: Factory) -> None:
    script = [CallTool("coven.shout", {"text": "hello"}), Reply("spell done")]
    async with ScriptedModelServer(script, responder=lambda r: Reply("extra")) as server:
        h = harness_factory(codex_bin, server)
        (h.tmp / "agent_test_spells.py").write_text(SPELLS_MODULE)
        daemon = await h.start("--spells", "agent_test_spells:shout")
        await h.think("c", "shout hello")
        entries = await h.wait_for(lambda es: "spell done" in replies(es, "c"), what="reply after the spell")
        results = [e for e in entries if e.kind == "tool_result" and e.conversation == "c"]
        assert results and "HELLO!" in results[0].text and not getattr(results[0], "is_error", True)
        outputs = [o.output for o in server.requests.function_call_outputs()]
        assert any("HELLO!" in o for o in outputs)
        toolbelt = json.loads((h.state_dir / "toolbelt.json").read_text())
        assert [tool["name"] for tool in toolbelt["tools"]] == ["send_file", "shout"]  # (send_file: built in)
        assert await h.stop(daemon) == 0


async def test_without_spells_of_its_own_the_daemon_serves_none_and_send_file_on_serves_it(
    codex_bin_169: Path, harness_factory: Factory
) -> None:
    """Codex starts the spells' MCP server (a shim process) for every thread it loads: a daemon with no
    spells of its own serves nothing by default (``send_file = "auto"``), so Codex is offered no
    ``coven`` tool; ``--send-file on`` serves the built-in ``send_file`` alone. (Served always, it cost
    a process per loaded thread: 256 of them, 3.4 GB, at N = 1,000 in bench_scale.)"""
    async with ScriptedModelServer(responder=lambda r: Reply("ok")) as server:
        h = harness_factory(codex_bin_169, server)
        daemon = await h.start()
        await h.think("c", "hello")
        await h.wait_for(lambda es: "ok" in replies(es, "c"), what="the reply")
        offered = {name for request in server.requests.responses_requests() for name in request.tool_names()}
        assert not any("send_file" in name for name in offered), offered
        assert not (h.state_dir / "toolbelt.json").exists()
        assert await h.stop(daemon) == 0
        daemon = await h.start("--send-file", "on")
        await h.think("d", "hello again")
        await h.wait_for(lambda es: "ok" in replies(es, "d"), what="the second reply")
        offered = {name for request in server.requests.responses_requests() for name in request.tool_names()}
        assert any("send_file" in name for name in offered), offered
        toolbelt = json.loads((h.state_dir / "toolbelt.json").read_text())
        assert [tool["name"] for tool in toolbelt["tools"]] == ["send_file"]
        assert await h.stop(daemon) == 0


async def test_second_daemon_on_the_same_state_is_refused(
    codex_bin_169: Path, model_server: ScriptedModelServer, harness_factory: Factory
) -> None:
    h = harness_factory(codex_bin_169, model_server)
    first = await h.start()
    await h.think("c", "hello")
    await h.wait_for(lambda es: "echo: hello" in replies(es, "c"), what="first reply")
    second = await h.start()
    assert await asyncio.wait_for(second.process.wait(), 30) == 1
    assert "another coven-codex daemon" in second.log()
    assert first.process.returncode is None
    assert await h.stop(first) == 0


async def test_sigterm_mid_turn_exits_cleanly_and_resumes(codex_bin: Path, harness_factory: Factory) -> None:
    responder = make_responder({"stuck": lambda r: (Stall(60.0), Reply("never"))})
    async with ScriptedModelServer(responder=responder) as server:
        h = harness_factory(codex_bin, server)
        daemon = await h.start()
        await h.think("c", "stuck in a turn")
        await server.requests.wait_for(1)
        started = asyncio.get_running_loop().time()
        assert await h.stop(daemon) == 0
        assert asyncio.get_running_loop().time() - started < 15  # kill_grace is 3 s in the harness
        assert not codex_processes(h.codex_home)
        # The thought reached Codex, so the next run does not send it again; the conversation goes on.
        daemon = await h.start()
        await h.think("c", "after the restart")
        await h.wait_for(lambda es: "echo: after the restart" in replies(es, "c"), what="reply after restart")
        prompts = [user_prompts(r)[-1] for r in server.requests.responses_requests()]
        assert prompts.count("stuck in a turn") == 1
        assert await h.stop(daemon) == 0


async def test_approval_policy_approve_answers_by_itself(codex_bin_169: Path, harness_factory: Factory) -> None:
    async with ScriptedModelServer(
        [escalated_command("touch auto.txt", "create auto.txt"), Reply("auto ran")], responder=lambda r: Reply("extra")
    ) as server:
        h = harness_factory(codex_bin_169, server)
        h.write_base_config(approval_policy="on-request")
        daemon = await h.start("--approval-policy", "approve")
        await h.think("c", "touch it")
        entries = await h.wait_for(lambda es: "auto ran" in replies(es, "c"), what="reply")
        # Nobody had to answer: the escalated command ran (whether Codex asked and the policy
        # answered, or the driver told Codex not to ask at all).
        assert (h.workspace / "auto.txt").exists()
        assert not [e for e in entries if isinstance(e, ErrorEntry)]
        assert await h.stop(daemon) == 0
