"""Parser: every record and payload type of the committed fixtures, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rollout_helpers import fixture_files, fixture_path, lines_of

from coven_codex.rollout import RolloutParseError, RolloutRecord, parse_line, peek_envelope
from coven_codex.rollout import records as r

EXPECTED_PAYLOAD_CLASSES: dict[tuple[str, str | None], set[type]] = {
    ("session_meta", None): {r.SessionMeta},
    ("turn_context", None): {r.TurnContext},
    ("world_state", None): {r.OtherPayload},
    ("token_usage_record", None): {r.OtherPayload},
    ("response_item", "message"): {r.MessageItem, r.ActivityRecord},  # a user's !command is an activity
    ("response_item", "custom_tool_call"): {r.ToolCallItem},
    ("response_item", "custom_tool_call_output"): {r.ToolOutputItem},
    ("response_item", "web_search_call"): {r.ActivityRecord},
    ("compacted", None): {r.ActivityRecord},
    ("event_msg", "context_compacted"): {r.OtherEvent},
    ("event_msg", "web_search_end"): {r.OtherEvent},
    ("event_msg", "entered_review_mode"): {r.OtherEvent},
    ("event_msg", "exited_review_mode"): {r.ActivityRecord},
    ("event_msg", "mcp_tool_call_end"): {r.McpCallEndEvent},
    ("response_item", "image_generation_call"): {r.ActivityRecord},
    ("response_item", "tool_search_call"): {r.ToolCallItem},
    ("response_item", "tool_search_output"): {r.ToolOutputItem},
    ("event_msg", "thread_goal_updated"): {r.ActivityRecord},
    ("response_item", "reasoning"): {r.ReasoningItem},
    ("response_item", "function_call"): {r.ToolCallItem},
    ("response_item", "function_call_output"): {r.ToolOutputItem},
    ("event_msg", "user_message"): {r.UserMessageEvent},
    ("event_msg", "agent_message"): {r.AgentMessageEvent},
    ("event_msg", "agent_reasoning"): {r.AgentReasoningEvent},
    ("event_msg", "token_count"): {r.TokenCountEvent},
    ("event_msg", "thread_settings_applied"): {r.OtherEvent},
    ("event_msg", "task_started"): {r.TurnStartedEvent},
    ("event_msg", "task_complete"): {r.TurnCompleteEvent},
    ("event_msg", "turn_aborted"): {r.TurnAbortedEvent},
    ("event_msg", "item_completed"): {
        r.AgentMessageEvent,
        r.UserMessageEvent,
        r.AgentReasoningEvent,
        r.ToolCallCompletedEvent,
        r.ActivityRecord,  # a Plan item
        r.ItemCompletedEvent,  # 0.171: an ImageView item (the view_image call repeated)
    },
}
OLD_FORMAT = {fixture_path("0.20.0", "old_format")}
"""Fixtures of the format before the envelope: every line is rejected, as such."""


@pytest.mark.parametrize("path", sorted(set(fixture_files()) - OLD_FORMAT), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_fixture_line_parses_to_its_typed_record(path: Path) -> None:
    data = path.read_bytes()
    for line in lines_of(data):
        record = parse_line(line.data, line.start)
        assert isinstance(record, RolloutRecord), record
        assert record.offset == line.start
        assert record.raw == json.loads(line.data)  # every field kept, unknown ones included
        key = (record.type, record.payload_type if record.type in {"response_item", "event_msg"} else None)
        assert type(record.payload) in EXPECTED_PAYLOAD_CLASSES[key], (key, record.payload)
        assert peek_envelope(line.data) == (record.type, record.payload_type)


def test_every_line_of_an_old_format_fixture_is_rejected_as_such() -> None:
    for path in OLD_FORMAT:
        for line in lines_of(path.read_bytes()):
            result = parse_line(line.data, line.start)
            assert isinstance(result, RolloutParseError) and result.legacy, result


def test_all_payload_types_of_both_versions_are_covered() -> None:
    seen = set()
    for path in sorted(set(fixture_files()) - OLD_FORMAT):
        for line in lines_of(path.read_bytes()):
            record = parse_line(line.data, line.start)
            assert isinstance(record, RolloutRecord)
            seen.add((record.type, record.payload_type if record.type in {"response_item", "event_msg"} else None))
    assert seen == set(EXPECTED_PAYLOAD_CLASSES)


def first(version: str, scenario: str, payload_class: type) -> r.Payload:
    for line in lines_of(fixture_path(version, scenario).read_bytes()):
        record = parse_line(line.data, line.start)
        assert isinstance(record, RolloutRecord)
        if isinstance(record.payload, payload_class):
            return record.payload
    raise AssertionError(f"no {payload_class.__name__} in {version}/{scenario}")


@pytest.mark.parametrize("version", ["0.169.0", "0.47.0"])
def test_typed_fields_carry_what_codex_recorded(version: str) -> None:
    meta = first(version, "single_reply", r.SessionMeta)
    assert isinstance(meta, r.SessionMeta)
    assert meta.cwd == "/workspace" and meta.cli_version == version and meta.thread_id
    call = first(version, "mcp_tool", r.ToolCallItem)
    assert isinstance(call, r.ToolCallItem)
    assert json.loads(call.arguments) == {"text": "ping"} and call.call_id
    assert (call.name, call.namespace) == (("echo", "mcp__echo") if version == "0.169.0" else ("echo__echo", None))
    output = first(version, "mcp_tool", r.ToolOutputItem)
    assert isinstance(output, r.ToolOutputItem) and "echo: ping" in output.output
    reply = first(version, "single_reply", r.AgentMessageEvent)
    assert isinstance(reply, r.AgentMessageEvent) and reply.text == "Hello there!"
    user = first(version, "single_reply", r.UserMessageEvent)
    assert isinstance(user, r.UserMessageEvent) and user.text == "say hello"


def test_0169_turn_events_and_errors() -> None:
    complete = first("0.169.0", "http_401", r.TurnCompleteEvent)
    assert isinstance(complete, r.TurnCompleteEvent)
    assert complete.error_message is not None and "401 Unauthorized" in complete.error_message
    assert complete.error_info == {"http_connection_failed": {"http_status_code": 401}}
    started = first("0.169.0", "http_401", r.TurnStartedEvent)
    assert isinstance(started, r.TurnStartedEvent) and started.turn_id == complete.turn_id
    failed_call = first("0.169.0", "mcp_tool_error", r.ToolCallCompletedEvent)
    assert isinstance(failed_call, r.ToolCallCompletedEvent) and failed_call.failed
    ok_call = first("0.169.0", "mcp_tool", r.ToolCallCompletedEvent)
    assert isinstance(ok_call, r.ToolCallCompletedEvent) and not ok_call.failed


def test_unknown_types_and_fields_are_kept() -> None:
    line = b'{"timestamp":"t","type":"brand_new","payload":{"type":"x","n":1},"extra_top":true}'
    record = parse_line(line, 5)
    assert isinstance(record, RolloutRecord)
    assert (record.type, record.payload_type, record.raw["extra_top"]) == ("brand_new", "x", True)
    assert record.payload == r.OtherPayload({"type": "x", "n": 1})
    event = parse_line(b'{"timestamp":"t","type":"event_msg","payload":{"type":"future_event","a":[1]}}', 0)
    assert isinstance(event, RolloutRecord) and event.payload == r.OtherEvent(
        "future_event", {"type": "future_event", "a": [1]}
    )
    item = parse_line(
        b'{"type":"response_item","payload":{"type":"message","role":"assistant",'
        b'"content":[{"type":"output_text","text":"hi","new_field":1}],"brand_new":2}}',
        0,
    )
    assert isinstance(item, RolloutRecord) and isinstance(item.payload, r.MessageItem)
    assert item.payload.text == "hi" and item.payload.raw["brand_new"] == 2 and item.timestamp is None


@pytest.mark.parametrize(
    "line",
    [
        b'{"type":"event_msg","payload":{"type":"agent_message","message":5}}',
        b'{"type":"event_msg","payload":{"type":"item_completed","item":"not an object"}}',
        b'{"type":"event_msg","payload":{"type":"item_completed","item":{"type":"McpToolCall","status":7}}}',
        b'{"type":"response_item","payload":{"type":"reasoning","summary":"flat"}}',
        b'{"type":"response_item","payload":{"type":"function_call","arguments":{"a":1},"name":null}}',
        b'{"type":"response_item","payload":{"type":"function_call_output","output":{"content":[{"text":"x"}]}}}',
        b'{"type":"event_msg","payload":{"type":"task_complete","error":"plain text"}}',
        b'{"type":"session_meta","payload":{"meta":{"id":"abc","cwd":"/w"}}}',
        b'{"type":"event_msg","payload":[1,2]}',
        b'{"type":"turn_context","payload":null}',
    ],
)
def test_unexpected_shapes_still_give_records(line: bytes) -> None:
    record = parse_line(line, 0)
    assert isinstance(record, RolloutRecord)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b'{"timestamp":"t","type":"event_msg","payload":{"type":"agent_mes', "not JSON"),
        (b"", "blank line"),
        (b"   ", "blank line"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b"[1,2]", "must be a JSON object"),
        (b'{"payload":{}}', "no string 'type'"),
        (b'{"type":"event_msg"}', "no 'payload'"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ],
)
def test_bad_lines_become_errors_with_their_offset(line: bytes, reason: str) -> None:
    error = parse_line(line, 1234)
    assert isinstance(error, RolloutParseError)
    assert error.offset == 1234 and reason in error.reason
    assert "1234" in error.describe() and len(error.excerpt) <= 80


def test_peek_envelope_reads_only_codex_shaped_lines() -> None:
    assert peek_envelope(b'{"timestamp":"x","ordinal":3,"type":"event_msg","payload":{"type":"token_count"') == (
        "event_msg",
        "token_count",
    )
    assert peek_envelope(b'{"timestamp":"x","type":"world_state","payload":{"full":true}}') == ("world_state", None)
    assert peek_envelope(b'{"type":"event_msg","timestamp":"x","payload":{}}') is None
    assert peek_envelope(b"garbage") is None


def test_app_server_turns_record_the_client_message_id() -> None:
    """turn/start's clientUserMessageId comes back as client_id: after a crash the rollout tells
    which thoughts Codex already received."""
    users = []
    for line in lines_of(fixture_path("0.169.0", "app_server_two_turns").read_bytes()):
        record = parse_line(line.data, line.start)
        if isinstance(record, RolloutRecord) and isinstance(record.payload, r.UserMessageEvent):
            users.append((record.payload.text, record.payload.client_id))
    assert users == [("first via app-server", "thought-1"), ("second via app-server", "thought-2")]
