"""Shapes seen in rollouts of Codex 0.58 to 0.147 (issue 17), one small case each; the recorded
fixtures in tests/fixtures/rollouts/<version>/ show the same on whole files."""

from __future__ import annotations

import json
from typing import Any

from rollout_helpers import translate

from coven_codex.entries import ErrorEntry, ResponseEntry, StatusEntry, ToolResultEntry
from coven_codex.rollout.tool_output import clean_tool_output


def _line(ts: str, kind: str, payload: dict[str, Any]) -> bytes:
    return json.dumps({"timestamp": ts, "type": kind, "payload": payload}, separators=(",", ":")).encode() + b"\n"


def _call_and_output(output: str) -> bytes:
    call = {"type": "function_call", "name": "exec_command", "arguments": '{"cmd":"x"}', "call_id": "c1"}
    result = {"type": "function_call_output", "call_id": "c1", "output": output}
    return _line("2026-01-01T00:00:00Z", "response_item", call) + _line("2026-01-01T00:00:01Z", "response_item", result)


def test_a_command_header_with_a_multi_line_command_still_gives_the_exit_code() -> None:
    output = (
        "Command: /bin/zsh -lc \"printf 'Output:\\n'\nexit 3\"\nChunk ID: 1a2b3c\nWall time: 0.0100 seconds\n"
        "Process exited with code 3\nOriginal token count: 2\nOutput:\nOutput:\n"
    )
    (result,) = [e for e in translate(_call_and_output(output)) if isinstance(e, ToolResultEntry)]
    assert (result.is_error, result.model_dump().get("exit_code"), result.text) == (True, 3, "Output:\n")


def test_code_mode_script_results() -> None:
    failed = clean_tool_output("Script failed\nWall time 0.0 seconds\nOutput:\n\nScript error:\nboom")
    assert (failed.failed, failed.text) == (True, "Script error:\nboom")
    bare = clean_tool_output("Script failed\nScript error:\nexec cell m1 not found")
    assert (bare.failed, bare.text) == (True, "Script error:\nexec cell m1 not found")
    listed = clean_tool_output('[{"type":"input_text","text":"Script failed"},{"type":"input_text","text":"no"}]')
    assert (listed.failed, listed.text) == (True, "no")
    done = clean_tool_output("Script completed\nWall time 2.0 seconds\nOutput:\nok")
    assert (done.failed, done.text) == (False, "ok")
    entries = translate(_call_and_output("Script failed\nScript error:\nrejected"))
    (result,) = [e for e in entries if e.kind == "tool_result"]
    assert isinstance(result, ToolResultEntry) and result.is_error


def test_a_turn_without_an_end_is_aborted_when_the_next_starts() -> None:
    data = (
        _line("2026-01-01T00:00:00Z", "event_msg", {"type": "task_started", "turn_id": "t1"})
        + _call_and_output("Process exited with code 0\nOutput:\n").split(b"\n")[0]
        + b"\n"
        + _line("2026-01-01T00:15:00Z", "event_msg", {"type": "task_started", "turn_id": "t2"})
        + _line("2026-01-01T00:15:01Z", "event_msg", {"type": "task_complete", "turn_id": "t2"})
    )
    entries = translate(data)
    assert [(e.kind, getattr(e, "state", None), getattr(e, "turn_id", None)) for e in entries] == [
        ("status", "turn_started", "t1"),
        ("tool_call", None, None),
        ("tool_result", None, None),
        ("status", "turn_aborted", "t1"),
        ("status", "turn_started", "t2"),
        ("status", "turn_completed", "t2"),
    ]
    result, aborted = entries[2], entries[3]
    assert isinstance(result, ToolResultEntry) and result.is_error and result.call_id == "c1"
    assert isinstance(aborted, StatusEntry) and aborted.id == "T:turn-t1:end"
    assert aborted.model_dump()["reason"] == "no_end_recorded"
    # a repeated task_started of the same turn (a resumed run) does not abort it
    again = _line("2026-01-01T00:00:00Z", "event_msg", {"type": "task_started", "turn_id": "t1"})
    assert [e.kind for e in translate(again + again)] == ["status", "status"]


def test_responses_take_the_turn_id_of_their_turn_when_the_event_has_none() -> None:
    data = _line("2026-01-01T00:00:00Z", "turn_context", {"turn_id": "t9", "cwd": "/w"}) + _line(
        "2026-01-01T00:00:01Z", "event_msg", {"type": "agent_message", "message": "hi"}
    )
    (reply,) = translate(data)
    assert isinstance(reply, ResponseEntry) and reply.turn_id == "t9"


def test_the_old_format_is_reported_once() -> None:
    header = {"id": "0a0b", "timestamp": "2025-08-01T00:00:00Z", "instructions": None}
    lines = [header, {"record_type": "state"}, {"type": "message", "role": "user", "content": []}] * 50
    data = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    entries = translate(data)
    assert len(entries) == 1
    (error,) = entries
    assert isinstance(error, ErrorEntry) and error.code == "VERSION" and error.hint


def test_timestamps_running_backwards_do_not_move_entries_back() -> None:
    data = (
        _line("2026-01-01T00:00:05Z", "event_msg", {"type": "agent_message", "message": "later"})
        + _line("2026-01-01T00:00:01Z", "event_msg", {"type": "agent_reasoning", "text": "stamped earlier"})
        + _line("2026-01-01T00:00:06Z", "event_msg", {"type": "agent_message", "message": "last"})
    )
    stamps = [e.ts.second for e in translate(data)]
    assert stamps == [5, 5, 6]


def test_code_mode_mcp_calls_and_patches_come_from_their_events_once() -> None:
    """In code mode a script's MCP calls and patches are recorded only as events; outside it the
    same events repeat a function call already shown."""
    mcp_end = {
        "type": "mcp_tool_call_end",
        "call_id": "exec-7",
        "invocation": {"server": "echo", "tool": "echo", "arguments": {"text": "hi"}},
        "result": {"Ok": {"content": [{"type": "text", "text": "echo: hi"}], "isError": False}},
    }
    failed_end = {**mcp_end, "call_id": "exec-8", "result": {"Err": "tool call failed: boom"}}
    patch_end = {"type": "patch_apply_end", "call_id": "p1", "success": True, "changes": {"/w/a.txt": {}}}
    data = b"".join(_line("2026-01-01T00:00:00Z", "event_msg", payload) for payload in (mcp_end, failed_end, patch_end))
    entries = translate(data)
    assert [(e.kind, e.model_dump().get("tool") or e.model_dump().get("activity"), e.text) for e in entries] == [
        ("tool_call", "echo.echo", 'echo.echo {"text": "hi"}'),
        ("tool_result", "echo.echo", "echo: hi"),
        ("tool_call", "echo.echo", 'echo.echo {"text": "hi"}'),
        ("tool_result", "echo.echo", "tool call failed: boom"),
        ("activity", "patch", "applied a patch: /w/a.txt"),
    ]
    assert [e.is_error for e in entries if isinstance(e, ToolResultEntry)] == [False, True]
    shown = _line(
        "2026-01-01T00:00:00Z",
        "response_item",
        {"type": "function_call", "name": "echo", "namespace": "mcp__echo", "arguments": "{}", "call_id": "exec-7"},
    ) + _line(
        "2026-01-01T00:00:00Z",
        "response_item",
        {"type": "custom_tool_call", "name": "apply_patch", "input": "*", "call_id": "p1"},
    )
    assert [e.kind for e in translate(shown + data)] == ["tool_call", "tool_call", "tool_call", "tool_result"]


def test_sub_agent_events_show_once() -> None:
    spawn = {
        "type": "collab_agent_spawn_end",
        "call_id": "s1",
        "new_thread_id": "child-1",
        "new_agent_nickname": "Tesla",
        "new_agent_role": "explorer",
        "prompt": "map the files",
    }
    alone = translate(_line("2026-01-01T00:00:00Z", "event_msg", spawn))
    assert [(e.kind, e.text, e.model_dump().get("agent_thread_id")) for e in alone] == [
        ("activity", "started a sub-agent Tesla (explorer): map the files", "child-1")
    ]
    call = {"type": "function_call", "name": "spawn_agent", "arguments": "{}", "call_id": "s1"}
    shown = _line("2026-01-01T00:00:00Z", "response_item", call) + _line("2026-01-01T00:00:00Z", "event_msg", spawn)
    assert [e.kind for e in translate(shown)] == ["tool_call"]


def test_plan_items() -> None:
    """Plan mode (0.116 to 0.135): the proposed plan is an ``item_completed`` ``Plan`` item."""
    plan = {"type": "item_completed", "turn_id": "t1", "item": {"type": "Plan", "id": "p", "text": "# Plan\n1. a"}}
    empty = {"type": "item_completed", "turn_id": "t1", "item": {"type": "Plan", "id": "q", "text": ""}}
    data = _line("2026-01-01T00:00:00Z", "event_msg", plan) + _line("2026-01-01T00:00:00Z", "event_msg", empty)
    assert [(e.kind, e.model_dump()["activity"], e.text, e.model_dump()["turn_id"]) for e in translate(data)] == [
        ("activity", "plan", "# Plan\n1. a", "t1")
    ]


def test_images() -> None:
    """A generated image shows its prompt; the picture itself is not put in the chat."""
    item = {"type": "image_generation_call", "status": "completed", "revised_prompt": "a cat", "result": "QUJD"}
    (entry,) = translate(_line("2026-01-01T00:00:00Z", "response_item", item))
    assert (entry.kind, entry.model_dump()["activity"], entry.text) == (
        "activity",
        "image",
        "generated an image: a cat",
    )
    assert "QUJD" not in entry.to_json()


def test_a_fork_shows_only_its_own_turns() -> None:
    """A fork embeds the parent's session_meta and history; the parent's turns were shown from the
    parent's rollout. Turn and thread ids are UUIDv7 (time-ordered) on the releases that fork."""
    parent, child = "019e0000-0000-7000-8000-000000000001", "019e0000-1000-7000-8000-000000000002"
    old_turn, new_turn = "019e0000-0001-7000-8000-000000000003", "019e0000-1001-7000-8000-000000000004"
    lines = [
        ("session_meta", {"id": child, "forked_from_id": parent}),
        ("session_meta", {"id": parent}),
        ("event_msg", {"type": "task_started", "turn_id": old_turn}),
        ("event_msg", {"type": "agent_message", "message": "the parent's answer"}),
        ("event_msg", {"type": "task_complete", "turn_id": old_turn}),
        ("event_msg", {"type": "task_started", "turn_id": new_turn}),
        ("event_msg", {"type": "agent_message", "message": "the fork's answer"}),
        ("event_msg", {"type": "task_complete", "turn_id": new_turn}),
    ]
    data = b"".join(_line("2026-01-01T00:00:00Z", kind, payload) for kind, payload in lines)
    assert [(e.kind, e.text) for e in translate(data)] == [
        ("status", "turn started"),
        ("response", "the fork's answer"),
        ("status", "turn completed"),
    ]
    # the same turns in a file that is not a fork are all shown
    assert len(translate(b"".join(_line("2026-01-01T00:00:00Z", k, p) for k, p in lines[2:]))) == 6
