"""The daemon's trace sink: log records split by Codex thread into one rotated file each."""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import JsonValue

from coven_codex.traces.records import TraceRecord
from coven_codex.traces.routing import ThreadRouter


def log_record(thread: str | None, text: str) -> JsonValue:
    attributes: list[JsonValue] = [{"key": "event.name", "value": {"stringValue": text}}]
    if thread is not None:
        attributes.append({"key": "conversation.id", "value": {"stringValue": thread}})
    return {"body": {"stringValue": text}, "attributes": attributes}


def record(signal: str, payload: dict[str, JsonValue]) -> TraceRecord:
    return TraceRecord.model_validate(
        {"received_at": "2026-01-01T00:00:00Z", "signal": signal, "encoding": "json", "payload": payload}
    )


def texts(path: Path) -> list[list[str]]:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [
        [
            r["body"]["stringValue"]
            for rl in line["payload"]["resourceLogs"]
            for s in rl["scopeLogs"]
            for r in s["logRecords"]
        ]
        for line in lines
    ]


def test_log_records_are_split_by_thread_and_the_rest_is_shared(tmp_path: Path) -> None:
    router = ThreadRouter(tmp_path)
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "codex_app_server"}}]}
    logs = [log_record("t-1", "a"), log_record("t-2", "b"), log_record("t-1", "c"), log_record(None, "d")]
    router.write(record("logs", {"resourceLogs": [{"resource": resource, "scopeLogs": [{"logRecords": logs}]}]}))
    router.write(record("traces", {"resourceSpans": []}))
    router.write(record("logs", {"resourceLogs": [{"scopeLogs": [{"logRecords": [log_record("../escape", "e")]}]}]}))
    router.close()
    assert texts(tmp_path / "t-1.jsonl") == [["a", "c"]]
    assert texts(tmp_path / "t-2.jsonl") == [["b"]]
    shared = [json.loads(line) for line in (tmp_path / "codex.jsonl").read_text().splitlines()]
    assert [line["signal"] for line in shared] == ["logs", "traces", "logs"]  # "d", the spans, the unsafe id
    first = json.loads((tmp_path / "t-1.jsonl").read_text())
    assert first["payload"]["resourceLogs"][0]["resource"] == resource
    assert sorted(path.name for path in tmp_path.iterdir()) == ["codex.jsonl", "t-1.jsonl", "t-2.jsonl"]


def test_each_threads_file_is_rotated_by_size(tmp_path: Path) -> None:
    router = ThreadRouter(tmp_path, max_bytes=400, backups=1)
    for index in range(3):
        payload: dict[str, JsonValue] = {
            "resourceLogs": [{"scopeLogs": [{"logRecords": [log_record("t", str(index) * 100)]}]}]
        }
        router.write(record("logs", payload))
    router.close()
    assert texts(tmp_path / "t.jsonl") == [["2" * 100]]
    assert texts(tmp_path / "t.jsonl.1") == [["1" * 100]]
    assert not (tmp_path / "t.jsonl.2").exists()


def test_at_most_max_open_files_stay_open_and_a_closed_one_is_appended_to(tmp_path: Path) -> None:
    from coven_codex.traces import routing

    router = ThreadRouter(tmp_path)
    threads = [f"t{index}" for index in range(routing.MAX_OPEN + 5)] + ["t0"]
    for thread in threads:
        router.write(record("logs", {"resourceLogs": [{"scopeLogs": [{"logRecords": [log_record(thread, thread)]}]}]}))
        open_files = [
            path for path in Path(f"/proc/{os.getpid()}/fd").iterdir() if str(path.resolve()).startswith(str(tmp_path))
        ]
        assert len(open_files) <= routing.MAX_OPEN
    router.close()
    assert texts(tmp_path / "t0.jsonl") == [["t0"], ["t0"]]
    assert len(list(tmp_path.glob("*.jsonl"))) == routing.MAX_OPEN + 5
