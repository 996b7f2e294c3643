"""Translator: the exact chat entries for every committed fixture scenario of both versions."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from rollout_helpers import FIXTURES, expected_files, fixture_files, fixture_path, lines_of, summary, translate

from coven_codex.entries import ErrorEntry, ResponseEntry, StatusEntry, ToolCallEntry, ToolResultEntry, parse_entry_json
from coven_codex.rollout import RolloutTranslator, display_tool_name, error_entry_from_message
from coven_codex.tailing import Line

START = ("status", "turn_started", "turn started")
DONE = ("status", "turn_completed", "turn completed")
ECHO_CALL = ("tool_call", "echo.echo", 'echo.echo {"text": "ping"}')

EXPECTED: dict[str, dict[str, list[tuple[str, ...]]]] = {
    "single_reply": {
        "0.169.0": [START, ("reasoning", "", "The user wants a greeting."), ("response", "", "Hello there!"), DONE],
        "0.47.0": [START, ("reasoning", "", "The user wants a greeting."), ("response", "", "Hello there!")],
    },
    "multi_turn": {
        "0.169.0": [
            START,
            ("response", "", "first answer"),
            DONE,
            START,
            ("response", "", "second answer, part one"),
            ("response", "", "part two"),
            DONE,
        ],
        "0.47.0": [
            START,
            ("response", "", "first answer"),
            START,
            ("response", "", "second answer, part one"),
            ("response", "", "part two"),
        ],
    },
    "mcp_tool": {
        "0.169.0": [
            START,
            ("response", "", "Calling the tool."),
            ECHO_CALL,
            ("tool_result", "echo.echo", "echo: ping"),
            ("response", "", "The tool said: echo: ping"),
            DONE,
        ],
        "0.47.0": [
            START,
            ("response", "", "Calling the tool."),
            ECHO_CALL,
            ("tool_result", "echo.echo", "echo: ping"),
            ("response", "", "The tool said: echo: ping"),
        ],
    },
    "mcp_tool_error": {
        "0.169.0": [
            START,
            ("tool_call", "echo.fail", 'echo.fail {"reason": "broken on purpose"}'),
            ("tool_result", "echo.fail", "broken on purpose"),
            ("response", "", "The tool failed."),
            DONE,
        ],
        "0.47.0": [
            START,
            ("tool_call", "echo.fail", 'echo.fail {"reason": "broken on purpose"}'),
            ("tool_result", "echo.fail", "broken on purpose"),
            ("response", "", "The tool failed."),
        ],
    },
    "http_401": {
        "0.169.0": [
            START,
            (
                "error",
                "AUTH",
                "unexpected status 401 Unauthorized: Incorrect API key provided, url: "
                "http://127.0.0.1:PORT/v1/responses",
            ),
            ("status", "turn_failed", "turn failed: AUTH"),
        ],
        "0.47.0": [START],
    },
    "http_429": {
        "0.169.0": [
            START,
            ("error", "RATE_LIMIT", "exceeded retry limit, last status: 429 Too Many Requests"),
            ("status", "turn_failed", "turn failed: RATE_LIMIT"),
        ],
        "0.47.0": [START],
    },
    "response_failed": {
        "0.169.0": [
            START,
            ("response", "", "partial"),
            ("error", "PROVIDER_ERROR", "stream disconnected before completion: The model had an internal error"),
            ("status", "turn_failed", "turn failed: PROVIDER_ERROR"),
        ],
        "0.47.0": [START, ("response", "", "partial")],
    },
    "error_then_resume": {
        "0.169.0": [
            START,
            ("error", "PROVIDER_ERROR", "We’re currently experiencing high demand, which may cause temporary errors."),
            ("status", "turn_failed", "turn failed: PROVIDER_ERROR"),
            START,
            ("response", "", "works now"),
            DONE,
        ],
        "0.47.0": [START, START, ("response", "", "works now")],
    },
    "app_server_two_turns": {
        "0.169.0": [START, ("response", "", "app answer one"), DONE, START, ("response", "", "app answer two"), DONE],
    },
    "exec_sigint": {
        "0.169.0": [START, ("response", "", "working on it"), ("status", "turn_aborted", "turn aborted (interrupted)")],
        "0.47.0": [START, ("response", "", "working on it"), ("status", "turn_aborted", "turn aborted (interrupted)")],
    },
    "app_server_interrupt": {
        "0.169.0": [START, ("response", "", "working on it"), ("status", "turn_aborted", "turn aborted (interrupted)")],
    },
}
CASES = [(scenario, version) for scenario, by_version in sorted(EXPECTED.items()) for version in by_version]


def normalise(rows: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    return [tuple(re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", part) for part in row) for row in rows]


@pytest.mark.parametrize(("scenario", "version"), CASES, ids=[f"{v}/{s}" for s, v in CASES])
def test_fixture_translates_to_the_exact_entries(scenario: str, version: str) -> None:
    entries = translate(fixture_path(version, scenario).read_bytes())
    assert normalise(summary(entries)) == EXPECTED[scenario][version]


def test_every_fixture_has_an_expected_translation() -> None:
    written = {(p.name.removesuffix(".expected.jsonl"), p.parent.name) for p in expected_files()}
    assert {(p.stem, p.parent.name) for p in fixture_files()} - set(CASES) - written == {
        ("shell_command", "0.169.0"),
        ("shell_command", "0.47.0"),
    }  # checked in its own test below


def test_shell_command_results_drop_codex_wrappers(fixture_version: str) -> None:
    entries = translate(fixture_path(fixture_version, "shell_command").read_bytes())
    call = next(e for e in entries if isinstance(e, ToolCallEntry))
    result = next(e for e in entries if isinstance(e, ToolResultEntry))
    expected_tool = "exec_command" if fixture_version == "0.169.0" else "shell"
    assert (call.tool, result.tool, result.call_id, result.is_error) == (
        expected_tool,
        expected_tool,
        call.call_id,
        False,
    )
    assert result.text.endswith("hi-from-shell\n") and "Wall time" not in result.text
    assert result.model_dump()["exit_code"] == 0


def test_tool_results_pair_with_calls_and_errors_are_flagged() -> None:
    entries = translate(fixture_path("0.169.0", "mcp_tool_error").read_bytes())
    call = next(e for e in entries if isinstance(e, ToolCallEntry))
    result = next(e for e in entries if isinstance(e, ToolResultEntry))
    assert call.arguments == {"reason": "broken on purpose"} and call.model_dump()["mcp_server"] == "echo"
    assert result.call_id == call.call_id and result.is_error is True
    ok = translate(fixture_path("0.169.0", "mcp_tool").read_bytes())
    assert [e.is_error for e in ok if isinstance(e, ToolResultEntry)] == [False]


@pytest.mark.parametrize("path", fixture_files(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_each_reply_once_prompt_never_echoed_ids_deterministic(path: Path) -> None:
    data = path.read_bytes()
    entries = translate(data, thread_id="thread-1")
    again = translate(data, thread_id="thread-1")
    assert [e.model_dump() for e in entries] == [e.model_dump() for e in again]
    assert [e.model_dump() for e in translate(data, thread_id="thread-1", decode_all=True)] == [
        e.model_dump() for e in entries
    ]
    ids = [e.id for e in entries]
    assert len(ids) == len(set(ids))
    offsets = {line.start for line in lines_of(data)}
    for entry in entries:
        assert entry.id is not None
        thread, offset, index = entry.id.rsplit(":", 2)
        if offset.startswith("turn-"):  # a turn's error or end: named by the turn, whoever writes it
            assert thread == "thread-1" and index in ("error", "end") and entry.kind in ("error", "status")
        else:
            assert thread == "thread-1" and int(offset) in offsets and int(index) >= 0
        assert entry.conversation == "conv" and entry.sender == "codex"
        assert parse_entry_json(entry.to_json()).model_dump() == entry.model_dump()  # journal round trip
    replies = [e.text for e in entries if isinstance(e, ResponseEntry)]
    assert len(replies) == len(set(replies))
    prompts = json.loads((FIXTURES / "scenarios.json").read_text())["scenarios"][path.stem]["prompts"]
    assert not {e.text for e in entries} & set(prompts)


def test_refeeding_after_a_restart_reproduces_the_entries_past_the_saved_offset() -> None:
    data = fixture_path("0.169.0", "mcp_tool").read_bytes()
    lines = lines_of(data)
    saved = lines[len(lines) // 2].start
    whole = RolloutTranslator("conv", "T")
    full = [(line.start, e) for line in lines for e in whole.feed(line)]
    rebuilt = RolloutTranslator("conv", "T")
    resumed = [e for line in lines for e in rebuilt.feed(line) if line.start >= saved]
    assert [e.model_dump() for e in resumed] == [e.model_dump() for start, e in full if start >= saved]
    assert any(isinstance(e, ToolResultEntry) and e.tool == "echo.echo" for e in resumed)


def test_bad_lines_are_reported_with_their_offset_and_translation_continues() -> None:
    good = fixture_path("0.169.0", "single_reply").read_bytes()
    torn_skippable = b'{"timestamp":"x","type":"event_msg","payload":{"type":"token_count","info":'
    torn_reply = b'{"timestamp":"x","type":"event_msg","payload":{"type":"item_completed","item":{"ty'
    data = torn_skippable + b"\n" + b"\n" + b"\x00garbage\n" + torn_reply + b"\n" + good
    entries = translate(data)
    errors = [e for e in entries if isinstance(e, ErrorEntry)]
    assert [(e.code, e.model_dump()["offset"]) for e in errors] == [
        ("BAD_LINE", 0),
        ("BAD_LINE", len(torn_skippable) + 2),
        ("BAD_LINE", len(torn_skippable) + 11),
    ]
    assert all(f"byte {e.model_dump()['offset']}" in e.text and e.hint for e in errors)
    assert [e.text for e in entries if isinstance(e, ResponseEntry)] == ["Hello there!"]


def test_a_record_appended_after_a_torn_one_is_still_translated() -> None:
    """Codex killed mid-write, then resumed: the new record follows the torn bytes on one line."""
    torn = b'{"timestamp":"2026-01-01T00:00:00Z","type":"event_msg","payload":{"type":"token_co'
    reply = (
        b'{"timestamp":"2026-01-01T00:00:01Z","type":"event_msg","payload":{"type":"agent_message",'
        b'"message":"after the crash"}}'
    )
    for decode_all in (False, True):
        entries = RolloutTranslator("conv", "T", decode_all=decode_all).feed_bytes(torn + reply, 100)
        assert [(e.kind, e.id) for e in entries] == [("error", "T:100:0"), ("response", f"T:{100 + len(torn)}:0")]
        assert f"byte {100 + len(torn)}" in entries[0].text and entries[1].text == "after the crash"


def test_too_long_lines_from_the_tailer_are_reported() -> None:
    (entry,) = RolloutTranslator("conv", "T").feed(Line(b"", 40, 9_000_000, too_long=True))
    assert isinstance(entry, ErrorEntry) and entry.code == "BAD_LINE" and entry.id == "T:40:0"


def test_turn_aborted_and_error_events_translate() -> None:
    translator = RolloutTranslator("conv", "T")
    aborted = translator.feed_bytes(
        b'{"timestamp":"2026-01-01T00:00:00Z","type":"event_msg","payload":'
        b'{"type":"turn_aborted","turn_id":"u1","reason":"interrupted"}}',
        10,
    )
    error = translator.feed_bytes(b'{"type":"event_msg","payload":{"type":"error","message":"Rate limit reached"}}', 99)
    retry = translator.feed_bytes(
        b'{"type":"event_msg","payload":{"type":"stream_error",'
        b'"message":"Reconnecting... 1/5 (stream disconnected before completion)"}}',
        200,
    )
    assert isinstance(aborted[0], StatusEntry) and (aborted[0].state, aborted[0].turn_id) == ("turn_aborted", "u1")
    assert aborted[0].ts.year == 2026
    assert isinstance(error[0], ErrorEntry) and error[0].code == "RATE_LIMIT" and error[0].id == "T:99:0"
    assert isinstance(retry[0], ErrorEntry) and retry[0].model_dump()["transient"] is True


def test_047_errors_from_exec_output_classify_through_error_entry_from_message() -> None:
    """0.47 never writes model errors into the rollout; the exec --json stream has them."""
    found = {}
    for scenario in ("http_401", "http_429"):
        for line in (FIXTURES / "0.47.0" / f"{scenario}.exec.jsonl").read_text().splitlines():
            message = json.loads(line)
            if message.get("type") == "error":
                found[scenario] = error_entry_from_message(message["message"], conversation="c", thread_id="T")
    assert (found["http_401"].code, found["http_401"].text) == (
        "AUTH",
        "exceeded retry limit, last status: 401 Unauthorized",
    )
    assert found["http_429"].code == "RATE_LIMIT" and found["http_429"].hint


def test_error_info_helps_classification() -> None:
    entry = error_entry_from_message("request failed", error_info={"http_connection_failed": {"http_status_code": 401}})
    assert entry.code == "AUTH" and entry.text == "request failed"
    assert error_entry_from_message("x", error_info="context_window_exceeded").code == "CONTEXT_LENGTH"
    assert error_entry_from_message("x", error_info="usage_limit_exceeded").code == "QUOTA"
    assert error_entry_from_message("", exit_code=124).code == "OUTER_TIMEOUT"


def test_display_tool_names() -> None:
    assert display_tool_name("echo", "mcp__echo") == ("echo.echo", "echo")
    assert display_tool_name("echo__echo", None) == ("echo.echo", "echo")
    assert display_tool_name("mcp__coven__cast", None) == ("coven.cast", "coven")
    assert display_tool_name("exec_command", None) == ("exec_command", None)
