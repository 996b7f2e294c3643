import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coven_codex.entries import (
    EntryError,
    ErrorEntry,
    GenericEntry,
    ThoughtEntry,
    ToolCallEntry,
    parse_entry,
    parse_entry_json,
)


def test_known_kind_is_parsed_into_its_class() -> None:
    entry = parse_entry_json('{"kind":"tool_call","tool":"add","arguments":{"a":1},"call_id":"c1"}')
    assert isinstance(entry, ToolCallEntry)
    assert entry.tool == "add"
    assert entry.arguments == {"a": 1}
    assert entry.sender == "codex"
    assert entry.conversation == "default"


def test_unknown_kind_round_trips_without_loss() -> None:
    line = {
        "id": "x1",
        "kind": "poll",
        "conversation": "c",
        "sender": "bob",
        "text": "?",
        "ts": "2026-01-02T03:04:05Z",
        "options": ["a", "b"],
        "nested": {"k": [1, 2]},
    }
    entry = parse_entry(line)
    assert isinstance(entry, GenericEntry)
    assert json.loads(entry.to_json()) == line


def test_unknown_fields_on_known_kinds_are_kept() -> None:
    entry = parse_entry({"kind": "thought", "text": "hi", "reply_to": "m7"})
    assert isinstance(entry, ThoughtEntry)
    assert json.loads(entry.to_json())["reply_to"] == "m7"


def test_timestamps_are_utc_iso() -> None:
    entry = parse_entry({"kind": "thought", "ts": "2026-01-02T05:04:05+02:00"})
    assert json.loads(entry.to_json())["ts"] == "2026-01-02T03:04:05Z"


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ([1, 2], "JSON object"),
        ({"text": "no kind"}, "kind"),
        ({"kind": ""}, "kind"),
        ({"kind": "tool_call"}, "tool"),
        ({"kind": "approval", "request_id": "r", "decision": "maybe"}, "decision"),
    ],
)
def test_invalid_entries_say_why(data: object, reason: str) -> None:
    with pytest.raises(EntryError, match=reason):
        parse_entry(data)


def test_not_json_is_an_entry_error() -> None:
    with pytest.raises(EntryError, match="not JSON"):
        parse_entry_json(b"{nope")


@given(st.text(), st.text(min_size=1), st.sampled_from(["thought", "response", "error", "zzz"]))
def test_round_trip_property(text: str, conversation: str, kind: str) -> None:
    entry = parse_entry({"kind": kind, "text": text, "conversation": conversation, "id": "i"})
    again = parse_entry_json(entry.to_json())
    assert again == entry
    assert type(again) is type(entry)


def test_error_entry_defaults() -> None:
    entry = ErrorEntry(text="boom")
    assert entry.code == "UNKNOWN"
    assert entry.sender == "codex"
