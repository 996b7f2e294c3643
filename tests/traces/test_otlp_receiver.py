"""The OTLP/HTTP receiver: both encodings in, one valid JSONL record per export out; it refuses
what it cannot use (malformed, oversized, wrong type or path, not HTTP) and keeps serving."""

from __future__ import annotations

import asyncio
import gzip
import json
from pathlib import Path

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from coven_codex.traces.receiver import OtlpReceiver
from coven_codex.traces.records import TraceRecord
from coven_codex.traces.writer import JsonlWriter

PROTOBUF = "application/x-protobuf"


async def post(
    port: int, path: str, body: bytes, content_type: str, *, extra: str = "", close: bool = True
) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        head = (
            f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: {content_type}\r\ncontent-length: {len(body)}\r\n"
            f"{extra}connection: {'close' if close else 'keep-alive'}\r\n\r\n"
        )
        writer.write(head.encode() + body)
        await writer.drain()
        return await read_response(reader)
    finally:
        writer.close()


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    status_line = await reader.readline()
    status = int(status_line.split()[1])
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    return status, await reader.readexactly(length)


def log_request(text: str) -> ExportLogsServiceRequest:
    record = LogRecord(time_unix_nano=1_700_000_000_000_000_000, body=AnyValue(string_value=text))
    return ExportLogsServiceRequest(resource_logs=[ResourceLogs(scope_logs=[ScopeLogs(log_records=[record])])])


def records(path: Path) -> list[TraceRecord]:
    return [TraceRecord.model_validate(json.loads(line)) for line in path.read_text().splitlines()]


async def test_json_and_protobuf_logs_and_traces_become_one_record_each(tmp_path: Path) -> None:
    out = tmp_path / "traces.jsonl"
    span = Span(trace_id=bytes(range(16)), span_id=bytes(range(8)), name="turn")
    traces = ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[span])])])
    json_logs = {"resourceLogs": [{"scopeLogs": [{"logRecords": [{"body": {"stringValue": "as json"}}]}]}]}
    async with OtlpReceiver(JsonlWriter(out)) as receiver:
        port = receiver.port
        as_protobuf = log_request("as protobuf").SerializeToString()
        assert await post(port, "/v1/logs", as_protobuf, "application/x-protobuf") == (200, b"")
        assert await post(port, "/v1/logs", json.dumps(json_logs).encode(), "application/json") == (200, b"{}")
        gz = gzip.compress(traces.SerializeToString())
        status, _ = await post(port, "/v1/traces", gz, "application/x-protobuf", extra="content-encoding: gzip\r\n")
        assert status == 200
    got = records(out)
    assert [(r.signal, r.encoding) for r in got] == [("logs", "protobuf"), ("logs", "json"), ("traces", "protobuf")]
    body = got[0].payload["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]  # type: ignore[index]
    assert body["body"] == {"stringValue": "as protobuf"}  # type: ignore[index]
    assert body["timeUnixNano"] == "1700000000000000000"  # type: ignore[index]
    assert got[1].payload == json_logs
    decoded_span = got[2].payload["resourceSpans"][0]["scopeSpans"][0]["spans"][0]  # type: ignore[index]
    assert decoded_span["traceId"] == bytes(range(16)).hex()  # type: ignore[index]
    assert decoded_span["spanId"] == bytes(range(8)).hex()  # type: ignore[index]


@pytest.mark.parametrize(
    ("path", "body", "content_type", "status"),
    [
        ("/v1/logs", b"\xff\x00 not protobuf at all", "application/x-protobuf", 400),
        ("/v1/logs", b"{not json", "application/json", 400),
        ("/v1/logs", b"[1, 2]", "application/json", 400),
        ("/v1/logs", b'{"resourceLogs": 3}', "application/json", 400),
        ("/v1/logs", b"{}", "text/plain", 415),
        ("/v1/nothing", b"{}", "application/json", 404),
    ],
)
async def test_unusable_payloads_are_refused_and_the_receiver_keeps_serving(
    tmp_path: Path, path: str, body: bytes, content_type: str, status: int
) -> None:
    out = tmp_path / "traces.jsonl"
    async with OtlpReceiver(JsonlWriter(out)) as receiver:
        got, _ = await post(receiver.port, path, body, content_type)
        assert got == status
        assert receiver.refused[status] == 1
        ok, _ = await post(receiver.port, "/v1/logs", log_request("after").SerializeToString(), PROTOBUF)
        assert ok == 200
    assert [r.signal for r in records(out)] == ["logs"]


async def test_an_oversized_payload_is_refused_unread_and_the_receiver_keeps_serving(tmp_path: Path) -> None:
    out = tmp_path / "traces.jsonl"
    async with OtlpReceiver(JsonlWriter(out), max_body=1000) as receiver:
        reader, writer = await asyncio.open_connection("127.0.0.1", receiver.port)
        # announces 10 MB and sends only the head: the answer must not wait for the body
        writer.write(b"POST /v1/logs HTTP/1.1\r\ncontent-type: application/json\r\ncontent-length: 10000000\r\n\r\n")
        await writer.drain()
        status, _ = await read_response(reader)
        assert status == 413
        assert await reader.read() == b""  # the connection is closed
        writer.close()
        gz_bomb = gzip.compress(b'{"resourceLogs": []}' + b" " * 5000)
        status, _ = await post(
            receiver.port, "/v1/logs", gz_bomb, "application/json", extra="content-encoding: gzip\r\n"
        )
        assert status == 413
        ok, _ = await post(receiver.port, "/v1/logs", log_request("small").SerializeToString(), PROTOBUF)
        assert ok == 200
    assert len(records(out)) == 1


async def test_garbage_that_is_not_http_closes_only_that_connection(tmp_path: Path) -> None:
    out = tmp_path / "traces.jsonl"
    async with OtlpReceiver(JsonlWriter(out)) as receiver:
        reader, writer = await asyncio.open_connection("127.0.0.1", receiver.port)
        writer.write(b"\x16\x03\x01 this is a TLS hello, not HTTP\r\n\r\n")
        await writer.drain()
        assert await reader.read() == b""
        writer.close()
        ok, _ = await post(receiver.port, "/v1/logs", b'{"resourceLogs": []}', "application/json")
        assert ok == 200


async def test_keep_alive_connections_are_served_and_closed_when_the_receiver_stops(tmp_path: Path) -> None:
    out = tmp_path / "traces.jsonl"
    async with OtlpReceiver(JsonlWriter(out)) as receiver:
        reader, writer = await asyncio.open_connection("127.0.0.1", receiver.port)
        for _ in range(3):
            body = b'{"resourceLogs": []}'
            writer.write(
                b"POST /v1/logs HTTP/1.1\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                % (len(body), body)
            )
            await writer.drain()
            assert (await read_response(reader))[0] == 200
    assert await reader.read() == b""  # the idle keep-alive connection was closed on exit
    writer.close()
    assert len(out.read_text().splitlines()) == 3


async def test_a_port_in_use_is_reported_with_what_to_do(tmp_path: Path) -> None:
    async with OtlpReceiver(JsonlWriter(tmp_path / "a.jsonl")) as first:
        with pytest.raises(OSError, match="--otel-port"):
            async with OtlpReceiver(JsonlWriter(tmp_path / "b.jsonl"), port=first.port):
                pass
