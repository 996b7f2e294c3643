"""The OTLP/HTTP receiver: both encodings in, one valid JSONL record per export out; it refuses
what it cannot use (malformed, oversized, wrong type or path, not HTTP) and keeps serving."""

from __future__ import annotations

import asyncio
import gzip
import json
import zlib
from pathlib import Path

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
from otlp_client import PROTOBUF, post, read_response, secret_line

from coven_codex.support import http11
from coven_codex.traces.receiver import OtlpReceiver
from coven_codex.traces.records import MAX_DEPTH, PayloadError, TraceRecord, decode_payload, json_depth, make_record
from coven_codex.traces.writer import JsonlWriter


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
        as_protobuf = log_request("as protobuf").SerializeToString()
        assert await post(receiver, "/v1/logs", as_protobuf, "application/x-protobuf") == (200, b"")
        assert await post(receiver, "/v1/logs", json.dumps(json_logs).encode(), "application/json") == (200, b"{}")
        gz = gzip.compress(traces.SerializeToString())
        status, _ = await post(receiver, "/v1/traces", gz, "application/x-protobuf", extra="content-encoding: gzip\r\n")
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
        got, _ = await post(receiver, path, body, content_type)
        assert got == status
        assert receiver.refused[status] == 1
        ok, _ = await post(receiver, "/v1/logs", log_request("after").SerializeToString(), PROTOBUF)
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
        status, _ = await post(receiver, "/v1/logs", gz_bomb, "application/json", extra="content-encoding: gzip\r\n")
        assert status == 413
        ok, _ = await post(receiver, "/v1/logs", log_request("small").SerializeToString(), PROTOBUF)
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
        ok, _ = await post(receiver, "/v1/logs", b'{"resourceLogs": []}', "application/json")
        assert ok == 200


async def test_keep_alive_connections_are_served_and_closed_when_the_receiver_stops(tmp_path: Path) -> None:
    out = tmp_path / "traces.jsonl"
    async with OtlpReceiver(JsonlWriter(out)) as receiver:
        reader, writer = await asyncio.open_connection("127.0.0.1", receiver.port)
        for _ in range(3):
            body = b'{"resourceLogs": []}'
            writer.write(
                b"POST /v1/logs HTTP/1.1\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n%s"
                % (len(body), secret_line(receiver).encode(), body)
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


def test_decode_body_inflates_one_coding_and_stops_at_the_limit() -> None:
    one_member = gzip.compress(bytes(4 * 2**20))
    with pytest.raises(http11.BodyTooLargeError, match="over 1048576 bytes once decompressed"):
        http11.decode_body(one_member, "gzip", limit=2**20)
    assert http11.decode_body(one_member, "gzip", limit=4 * 2**20) == bytes(4 * 2**20)
    assert http11.decode_body(gzip.compress(b"a") + gzip.compress(b"b"), "x-gzip") == b"ab"  # members concatenated
    assert http11.decode_body(zlib.compress(b"deflated"), "identity, deflate") == b"deflated"
    assert http11.decode_body(b"plain", "") == b"plain"
    with pytest.raises(zlib.error, match="ends before"):
        http11.decode_body(one_member[:-100], "gzip")
    with pytest.raises(zlib.error, match="after the end"):
        http11.decode_body(zlib.compress(b"x") + b"junk", "deflate")
    with pytest.raises(http11.UnsupportedEncodingError, match="stacked"):
        http11.decode_body(one_member, "deflate, gzip")
    with pytest.raises(http11.UnsupportedEncodingError, match="br"):
        http11.decode_body(one_member, "br")


@pytest.mark.parametrize(
    ("body", "depth"),
    [(b"{}", 1), (b'[[1, {"a": [2]}]]', 4), (b'{"a": "[[[\\"[{"}', 1), (b"3", 0), (b"[" * 5000, 5000)],
)
def test_json_depth_counts_brackets_outside_strings(body: bytes, depth: int) -> None:
    assert json_depth(body) == depth


def test_json_payloads_up_to_the_depth_limit_are_accepted_and_written() -> None:
    nested: object = 1
    for _ in range(MAX_DEPTH - 1):  # in the payload's object: MAX_DEPTH levels
        nested = [nested]
    body = json.dumps({"resourceLogs": [], "x": nested}).encode()
    assert json_depth(body) == MAX_DEPTH
    record = make_record("logs", "json", decode_payload("logs", "json", body))
    assert json.loads(record.to_line())["payload"] == json.loads(body)
    too_deep = json.dumps({"resourceLogs": [], "x": [nested]}).encode()
    with pytest.raises(PayloadError, match=f"accepted up to {MAX_DEPTH} levels"):
        decode_payload("logs", "json", too_deep)
