"""One received OTLP export as a JSONL record, and decoding of both OTLP/HTTP encodings.

A record is ``{"received_at": ISO-8601 UTC, "signal": "logs"|"traces"|"metrics", "encoding":
"json"|"protobuf", "payload": <the export request in OTLP/JSON form>}``. A protobuf payload is
decoded with ``opentelemetry-proto`` into the same OTLP/JSON mapping a JSON exporter sends
(``resourceLogs`` / ``resourceSpans`` / ``resourceMetrics``, camelCase field names, 64-bit
integers as strings, enums as numbers, trace and span ids as hex), so a reader need not care
which encoding Codex used.
"""

from __future__ import annotations

import base64
import itertools
import json
import operator
import re
from datetime import UTC, datetime
from typing import Literal

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from pydantic import BaseModel, ConfigDict, JsonValue

Signal = Literal["logs", "traces", "metrics"]
Encoding = Literal["json", "protobuf"]

SIGNALS: dict[str, Signal] = {"/v1/logs": "logs", "/v1/traces": "traces", "/v1/metrics": "metrics"}
ROOT_KEYS: dict[Signal, str] = {"logs": "resourceLogs", "traces": "resourceSpans", "metrics": "resourceMetrics"}
_REQUESTS: dict[Signal, type[Message]] = {
    "logs": ExportLogsServiceRequest,
    "traces": ExportTraceServiceRequest,
    "metrics": ExportMetricsServiceRequest,
}
_HEX_ID_FIELDS = frozenset({"traceId", "spanId", "parentSpanId"})
JSON_TYPES = frozenset({"application/json"})
PROTOBUF_TYPES = frozenset({"application/x-protobuf", "application/protobuf"})
MAX_DEPTH = 100
"""How deeply a JSON payload may nest: protobuf's own limit for nested messages."""
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_BRACKET_STEPS = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))


class PayloadError(ValueError):
    """A payload is not a valid OTLP export request of its signal and encoding."""


class TraceRecord(BaseModel):
    """One line of ``traces.jsonl``: an OTLP export request as received."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    received_at: str
    signal: Signal
    encoding: Encoding
    payload: dict[str, JsonValue]

    def to_line(self) -> bytes:
        """The record as one JSONL line (UTF-8, ending in a newline)."""
        return self.model_dump_json().encode("utf-8") + b"\n"


def encoding_of(content_type: str) -> Encoding | None:
    """The OTLP encoding a ``Content-Type`` header names, ``None`` for anything else."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media in JSON_TYPES:
        return "json"
    if media in PROTOBUF_TYPES:
        return "protobuf"
    return None


def decode_payload(signal: Signal, encoding: Encoding, body: bytes) -> dict[str, JsonValue]:
    """The export request in ``body`` as an OTLP/JSON mapping; :class:`PayloadError` if malformed."""
    if encoding == "protobuf":
        message = _REQUESTS[signal]()
        try:
            message.ParseFromString(body)
        except DecodeError as exc:
            raise PayloadError(f"not a protobuf {type(message).__name__}: {exc}") from None
        decoded: JsonValue = json_format.MessageToDict(message, use_integers_for_enums=True)
        return _hex_ids(decoded)  # type: ignore[return-value]
    depth = json_depth(body)
    if depth > MAX_DEPTH:
        raise PayloadError(f"JSON nested {depth} deep; OTLP payloads are accepted up to {MAX_DEPTH} levels")
    try:
        parsed = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PayloadError(f"not JSON: {exc}") from None
    root = ROOT_KEYS[signal]
    if not isinstance(parsed, dict) or not isinstance(parsed.get(root, []), list):
        raise PayloadError(f"not an OTLP/JSON {signal} export request (an object with a {root!r} list)")
    return parsed


def json_depth(body: bytes) -> int:
    """How deeply ``body``'s arrays and objects nest (brackets inside strings do not count), found
    without parsing: ``json.loads`` would recurse once per level and can raise ``RecursionError``."""
    brackets = _JSON_STRING.sub(b"", body).translate(_BRACKET_STEPS, _NOT_BRACKETS)
    # each opening bracket is a 2, each closing one a 0: the depth after n brackets is their sum minus n
    return max(map(operator.sub, itertools.accumulate(brackets), range(1, len(brackets) + 1)), default=0)


def make_record(signal: Signal, encoding: Encoding, payload: dict[str, JsonValue]) -> TraceRecord:
    """A record stamped with the current UTC time."""
    stamp = datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
    return TraceRecord(received_at=stamp, signal=signal, encoding=encoding, payload=payload)


def _hex_ids(value: JsonValue) -> JsonValue:
    """protobuf's JSON mapping writes ``bytes`` ids as base64; OTLP/JSON writes them as hex."""
    if isinstance(value, dict):
        return {
            key: base64.b64decode(inner).hex() if key in _HEX_ID_FIELDS and isinstance(inner, str) else _hex_ids(inner)
            for key, inner in value.items()
        }
    if isinstance(value, list):
        return [_hex_ids(inner) for inner in value]
    return value
