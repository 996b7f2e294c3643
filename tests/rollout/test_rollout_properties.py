"""Property-based tests: random and mutated lines never make the parser or the translator
raise, and every bad line is reported with its offset."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rollout_helpers import fixture_files, lines_of

from coven_codex.entries import ErrorEntry
from coven_codex.rollout import RolloutParseError, RolloutRecord, RolloutTranslator, parse_line, peek_envelope
from coven_codex.rollout.parser import is_legacy_record
from coven_codex.rollout.translator import RECORD_START, SKIPPED_ENVELOPES

REAL_LINES: list[bytes] = [line.data for path in fixture_files() for line in lines_of(path.read_bytes())]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)
record_types = st.sampled_from(
    [
        "session_meta",
        "turn_context",
        "response_item",
        "event_msg",
        "world_state",
        "token_usage_record",
        "compacted",
        "something_new",
    ]
)
payload_types = st.sampled_from(
    [
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
        "custom_tool_call",
        "local_shell_call",
        "user_message",
        "agent_message",
        "agent_reasoning",
        "item_completed",
        "task_started",
        "task_complete",
        "turn_aborted",
        "error",
        "stream_error",
        "token_count",
        "brand_new",
    ]
)
item_types = st.sampled_from(["AgentMessage", "UserMessage", "Reasoning", "McpToolCall", "CommandExecution", "X"])


@st.composite
def plausible_lines(draw: st.DrawFn) -> bytes:
    """Envelopes Codex could write, with random payload fields and values of random types."""
    payload: dict[str, Any] = draw(
        st.dictionaries(
            st.sampled_from(
                [
                    "message",
                    "text",
                    "content",
                    "call_id",
                    "name",
                    "namespace",
                    "arguments",
                    "output",
                    "turn_id",
                    "error",
                    "summary",
                    "role",
                    "status",
                    "reason",
                    "id",
                    "cwd",
                    "meta",
                ]
            ),
            json_values,
            max_size=6,
        )
    )
    payload["type"] = draw(payload_types)
    if payload["type"] == "item_completed" and draw(st.booleans()):
        item = draw(
            st.dictionaries(
                st.sampled_from(["id", "content", "status", "result", "summary_text", "exit_code", "client_id"]),
                json_values,
                max_size=4,
            )
        )
        item["type"] = draw(item_types)
        payload["item"] = item
    line = {"timestamp": "2026-01-01T00:00:00.000Z", "type": draw(record_types), "payload": payload}
    return json.dumps(line, separators=(",", ":")).encode()


@st.composite
def mutated_real_lines(draw: st.DrawFn) -> bytes:
    line = draw(st.sampled_from(REAL_LINES))
    operation = draw(st.sampled_from(["truncate", "flip", "insert", "delete", "splice"]))
    position = draw(st.integers(0, max(0, len(line) - 1)))
    if operation == "truncate":
        return line[:position]
    if operation == "flip":
        return line[:position] + bytes([draw(st.integers(0, 255))]) + line[position + 1 :]
    if operation == "insert":
        return line[:position] + draw(st.binary(min_size=1, max_size=8)) + line[position:]
    if operation == "delete":
        return line[:position] + line[position + draw(st.integers(1, 16)) :]
    other = draw(st.sampled_from(REAL_LINES))
    return line[:position] + other[draw(st.integers(0, max(0, len(other) - 1))) :]


any_line = (
    st.binary(max_size=200).filter(lambda b: b"\n" not in b)
    | plausible_lines()
    | mutated_real_lines()
    | st.sampled_from(REAL_LINES)
)


def is_bad(data: bytes) -> bool:
    try:
        obj = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return bool(data.strip())
    return not (isinstance(obj, dict) and isinstance(obj.get("type"), str) and "payload" in obj)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(line=any_line, offset=st.integers(0, 2**40))
def test_parse_line_never_raises_and_rejects_exactly_the_bad_lines(line: bytes, offset: int) -> None:
    result = parse_line(line, offset)
    assert result.offset == offset
    if is_bad(line) or not line.strip():
        assert isinstance(result, RolloutParseError) and result.reason
    else:
        assert isinstance(result, RolloutRecord)
        assert result.raw == json.loads(line.decode("utf-8"))


def is_old_format(data: bytes) -> bool:
    """A record of the rollout format before the envelope (header, state line or bare item)."""
    try:
        obj = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return False
    return isinstance(obj, dict) and "payload" not in obj and is_legacy_record(obj)


def expected_reports(line: bytes, offset: int, *, decode_all: bool, old_file: bool = False) -> set[int]:
    """The offsets at which the translator must report a bad line (the spec, restated): a file
    whose first line is of the old format gets one ``VERSION`` error instead, however many old
    lines follow."""
    if (offset == 0 or old_file) and is_old_format(line):
        return set()
    if (
        not decode_all
        and peek_envelope(line) in SKIPPED_ENVELOPES
        and line.find(RECORD_START, 1) == -1
        and b"<user_shell_command>" not in line  # a user's !command is decoded (an activity)
    ):
        return set() if line.rstrip().endswith(b"}") else {offset}
    if not is_bad(line) or not line.strip():
        return set()
    resumed_at = line.rfind(RECORD_START, 1)
    if resumed_at == -1:
        return {offset}
    return {offset} | expected_reports(line[resumed_at:], offset + resumed_at, decode_all=decode_all)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.lists(any_line.filter(lambda b: b"\n" not in b), min_size=1, max_size=25))
def test_translator_never_raises_and_reports_every_bad_line(lines: list[bytes]) -> None:
    data = b"".join(line + b"\n" for line in lines)
    offsets = []
    position = 0
    for line in lines:
        offsets.append(position)
        position += len(line) + 1
    for decode_all in (True, False):
        translator = RolloutTranslator("conv", "T", decode_all=decode_all)
        entries = [entry for line in lines_of(data) for entry in translator.feed(line)]
        reported = {e.model_dump()["offset"] for e in entries if isinstance(e, ErrorEntry) and e.code == "BAD_LINE"}
        expected: set[int] = set()
        old_file = is_old_format(lines[0])
        for line, offset in zip(lines, offsets, strict=True):
            expected |= expected_reports(line, offset, decode_all=decode_all, old_file=old_file)
        assert reported == expected
        versions = [
            e for e in entries if isinstance(e, ErrorEntry) and e.code == "VERSION" and "offset" in e.model_dump()
        ]
        assert len(versions) == (1 if old_file else 0)
        ids = [e.id for e in entries]
        assert len(ids) == len(set(ids))
        again = RolloutTranslator("conv", "T", decode_all=decode_all)
        # ts may differ only for lines read before any line carried a timestamp
        assert [e.model_dump(exclude={"ts"}) for line in lines_of(data) for e in again.feed(line)] == [
            e.model_dump(exclude={"ts"}) for e in entries
        ]
