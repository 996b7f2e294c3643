"""What Codex releases newer than the pinned ones write (issue 26, item 16), one type per test.

Lines the real 0.171.0 CLI wrote offline are in ``tests/fixtures/rollouts/0.171.0/newer_items``
(tool search, a dynamic tool's call, a generated image, ``view_image``, a thread goal); the tests
here take a line of that fixture where there is one. Types no CLI wrote offline are minimal lines
in the exact shape openai/codex's protocol defines (``codex-rs/protocol/src/protocol.rs``,
``approvals.rs``; the source of each is named in ``docs/rollout.md``, "Rollouts of other Codex
releases").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rollout_helpers import fixture_path, lines_of, translate

from coven_codex.entries import ActivityEntry, BaseEntry, ErrorEntry, ToolCallEntry, ToolResultEntry
from coven_codex.rollout import RolloutTranslator

NEWER = fixture_path("0.171.0", "newer_items")


def _line(kind: str, payload: dict[str, Any], ts: str = "2026-11-20T10:00:00.000Z") -> bytes:
    return json.dumps({"timestamp": ts, "type": kind, "payload": payload}, separators=(",", ":")).encode() + b"\n"


def _recorded(kind: str, payload_type: str) -> list[bytes]:
    """The lines of the 0.171.0 fixture with this envelope, as Codex wrote them."""
    head = f'"type":"{kind}","payload":{{"type":"{payload_type}"'.encode()
    return [line + b"\n" for line in NEWER.read_bytes().splitlines() if head in line]


def _activities(entries: list[BaseEntry]) -> list[tuple[str, str]]:
    return [(e.activity, e.text) for e in entries if isinstance(e, ActivityEntry)]


def test_a_tool_search_shows_as_a_call_and_its_result() -> None:
    (call,) = _recorded("response_item", "tool_search_call")
    (output,) = _recorded("response_item", "tool_search_output")
    entries = translate(call + output)
    assert [type(e) for e in entries] == [ToolCallEntry, ToolResultEntry]
    shown, result = entries
    assert isinstance(shown, ToolCallEntry) and isinstance(result, ToolResultEntry)
    assert (shown.tool, shown.arguments, shown.call_id) == (
        "tool_search",
        {"query": "lookup a record", "limit": 5},
        "ts_fixture1",
    )
    assert (result.tool, result.call_id, result.is_error, result.text) == (
        "tool_search",
        "ts_fixture1",
        False,
        "found no tools",
    )
    found = {
        "type": "tool_search_output",
        "call_id": "ts_fixture1",
        "status": "completed",
        "execution": "client",
        "tools": [{"type": "namespace", "name": "records", "tools": [{"type": "function", "name": "lookup"}]}],
    }
    (loaded,) = translate(_line("response_item", found))
    assert loaded.text == "found 1 tool: records.lookup"


def test_a_dynamic_tool_call_shows_once_from_its_function_call() -> None:
    """The model calls a client's dynamic tool like any function; the ``DynamicToolCall`` item and
    the ``dynamic_tool_call_request`` / ``_response`` events (extended history only) repeat it."""
    data = NEWER.read_bytes()
    entries = [e for e in translate(data) if isinstance(e, ToolCallEntry | ToolResultEntry) and e.call_id == "call_12"]
    assert [(e.kind, e.tool, e.text) for e in entries] == [
        ("tool_call", "lookup", 'lookup {"id": 7}'),
        ("tool_result", "lookup", 'dynamic tool lookup called with {"id": 7}'),
    ]
    request = {
        "type": "dynamic_tool_call_request",
        "callId": "call_12",
        "turnId": "t",
        "tool": "lookup",
        "arguments": {"id": 7},
    }
    response = {
        "type": "dynamic_tool_call_response",
        "call_id": "call_12",
        "turn_id": "t",
        "tool": "lookup",
        "arguments": {"id": 7},
        "content_items": [{"type": "inputText", "text": "x"}],
        "success": False,
        "error": "no such record",
    }
    assert translate(_line("event_msg", request) + _line("event_msg", response)) == []
    failed = {
        "type": "item_completed",
        "turn_id": "t",
        "item": {"type": "DynamicToolCall", "id": "c9", "tool": "lookup", "arguments": {}, "status": "failed"},
    }
    call = {"type": "function_call", "name": "lookup", "arguments": "{}", "call_id": "c9"}
    output = {"type": "function_call_output", "call_id": "c9", "output": "no such record"}
    lines = _line("response_item", call) + _line("event_msg", failed) + _line("response_item", output)
    (result,) = [e for e in translate(lines) if isinstance(e, ToolResultEntry)]
    assert result.is_error


def test_a_generated_image_shows_its_prompt_once() -> None:
    (item,) = _recorded("response_item", "image_generation_call")
    end = {
        "type": "image_generation_end",
        "call_id": "ig_fixture1",
        "status": "completed",
        "revised_prompt": "A single red pixel on a white background",
        "result": "iVBORw0KGgo=",
        "saved_path": "/codex-home/generated_images/ig_fixture1.png",
    }
    entries = translate(item + _line("event_msg", end))
    assert _activities(entries) == [("image", "generated an image: A single red pixel on a white background")]
    assert len(entries) == 1 and "iVBOR" not in entries[0].to_json()


def test_view_image_shows_a_call_and_an_image_placeholder() -> None:
    """``view_image`` returns the picture as an ``input_image`` part: the result says ``[image]``
    (it used to be an empty text); ``ImageView`` and ``view_image_tool_call`` repeat the call."""
    lines = [line + b"\n" for line in NEWER.read_bytes().splitlines() if b'"call_5"' in line]
    assert len(lines) == 3  # function_call, item_completed ImageView, function_call_output
    event = {"type": "view_image_tool_call", "call_id": "call_5", "path": "/workspace/pixel.png"}
    entries = translate(b"".join(lines) + _line("event_msg", event))
    assert [(e.kind, e.text) for e in entries] == [
        ("tool_call", 'view_image {"path": "pixel.png"}'),
        ("tool_result", "[image]"),
    ]


def test_guardian_assessments_show_their_verdict() -> None:
    """``guardian_assessment`` (``GuardianAssessmentEvent`` in codex-rs/protocol/src/approvals.rs;
    persisted in extended history): the verdict is shown, ``in_progress`` is not."""
    base: dict[str, Any] = {
        "type": "guardian_assessment",
        "id": "review-1",
        "target_item_id": "call_1",
        "turn_id": "t1",
        "started_at_ms": 1795801866000,
        "action": {"type": "command", "source": "shell", "command": "rm -rf build", "cwd": "/workspace"},
    }
    pending = {**base, "status": "in_progress"}
    denied = {
        **base,
        "status": "denied",
        "completed_at_ms": 1795801867000,
        "risk_level": "high",
        "user_authorization": "unknown",
        "rationale": "Deletes files outside the task.",
        "decision_source": "agent",
    }
    network = {
        **base,
        "id": "review-2",
        "status": "approved",
        "risk_level": "low",
        "action": {
            "type": "network_access",
            "target": "https://pypi.org",
            "host": "pypi.org",
            "protocol": "https",
            "port": 443,
        },
    }
    entries = translate(b"".join(_line("event_msg", p) for p in (pending, denied, network)))
    assert _activities(entries) == [
        ("guardian", "auto-review denied the command rm -rf build (risk: high): Deletes files outside the task."),
        ("guardian", "auto-review approved network access to https://pypi.org (risk: low)"),
    ]
    first = entries[0]
    assert isinstance(first, ActivityEntry) and first.turn_id == "t1"
    assert (first.model_dump()["status"], first.model_dump()["risk_level"]) == ("denied", "high")


def test_a_thread_goal_update_shows_the_goal() -> None:
    (updated,) = _recorded("event_msg", "thread_goal_updated")
    (entry,) = translate(updated)
    assert isinstance(entry, ActivityEntry)
    assert (entry.activity, entry.text, entry.model_dump()["status"]) == (
        "goal",
        "goal: Ship the fixture, really (active)",
        "active",
    )


def test_the_goal_objective_codex_hands_the_model_is_not_a_tool_result() -> None:
    """0.171 gives the model the goal as a ``function_call_output`` of no call (``name:
    goal_objective``): context for the model, not a tool's result."""
    (context,) = [line + b"\n" for line in NEWER.read_bytes().splitlines() if b'"goal_objective"' in line]
    assert translate(context) == []


def test_a_thread_name_update_shows_the_name() -> None:
    """``thread_name_updated`` (``{thread_id, thread_name}``, seen in published rollouts; the
    offline 0.171 CLI keeps the name in its session index, not the rollout)."""
    named = {"type": "thread_name_updated", "thread_id": "T", "thread_name": "Fix the parser"}
    (entry,) = translate(_line("event_msg", named))
    assert (entry.kind, entry.model_dump()["activity"], entry.text) == (
        "activity",
        "thread_name",
        "thread named 'Fix the parser'",
    )


def test_undo_and_rollback_show_what_was_undone() -> None:
    """``undo_completed`` (``UndoCompletedEvent {success, message}``, releases with ghost snapshots)
    and ``thread_rolled_back`` (``ThreadRolledBackEvent {num_turns}``); ``undo_started`` gives nothing."""
    lines = (
        _line("event_msg", {"type": "undo_started", "message": "Undo in progress..."})
        + _line("event_msg", {"type": "undo_completed", "success": True, "message": "Undo restored snapshot abc1234."})
        + _line("event_msg", {"type": "undo_completed", "success": False, "message": "No snapshot available to undo."})
        + _line("event_msg", {"type": "thread_rolled_back", "num_turns": 2})
    )
    assert _activities(translate(lines)) == [
        ("undo", "undid the last turn's changes: Undo restored snapshot abc1234."),
        ("undo", "undo failed: No snapshot available to undo."),
        ("rollback", "the history was rolled back by 2 turns"),
    ]


def test_messages_between_agents_show_who_wrote_to_whom() -> None:
    """The ``inter_agent_communication`` record (``InterAgentCommunication {author, recipient,
    other_recipients, content, trigger_turn}``, protocol.rs ``RolloutItem``)."""
    message = {
        "author": "/root/worker",
        "recipient": "/root",
        "other_recipients": [],
        "content": "Found 3 failing tests.",
        "trigger_turn": True,
    }
    (entry,) = translate(_line("inter_agent_communication", message))
    assert isinstance(entry, ActivityEntry)
    assert (entry.activity, entry.text) == ("agent_message", "/root/worker → /root: Found 3 failing tests.")
    assert (entry.model_dump()["author"], entry.model_dump()["recipient"]) == ("/root/worker", "/root")


def test_bad_lines_get_the_same_time_when_the_file_is_read_again() -> None:
    """A bad line takes the previous line's time; one before any timestamped line the thread's
    creation time (its UUIDv7 id), never the time of reading."""
    thread = "01a21e22-1f5d-7612-901d-bd065c6febb9"
    data = b"not json\n" + _line("event_msg", {"type": "agent_message", "message": "hi"}) + b"{torn\n"

    def read() -> list[BaseEntry]:
        translator = RolloutTranslator("conv", thread)
        return [entry for line in lines_of(data) for entry in translator.feed(line)]

    first, again = read(), read()
    assert [e.kind for e in first] == ["error", "response", "error"]
    assert [e.ts for e in first] == [e.ts for e in again]
    assert all(isinstance(e, ErrorEntry) for e in (first[0], first[2]))
    assert first[0].ts.isoformat() == "2026-11-27T17:51:22.461000+00:00"  # 0x01a21e221f5d ms
    assert first[2].ts == first[1].ts
    (epoch,) = RolloutTranslator("conv", "not-a-uuid").feed_bytes(b"garbage", 0)
    assert epoch.ts.timestamp() == 0


def test_the_fixture_of_0171_was_written_by_0171() -> None:
    meta = json.loads(Path(NEWER).read_bytes().splitlines()[0])
    assert meta["payload"]["cli_version"] == "0.171.0"
