"""Trace capture: a loopback OTLP/HTTP receiver for what Codex exports, written as JSONL (docs/exec.md, Traces).

- :class:`~coven_codex.traces.receiver.OtlpReceiver`: serves ``/v1/logs``, ``/v1/traces`` and
  ``/v1/metrics`` on 127.0.0.1, JSON and protobuf encodings;
- :class:`~coven_codex.traces.writer.JsonlWriter`: one record a line, optionally rotated by size;
- :class:`~coven_codex.traces.routing.ThreadRouter`: the daemon's sink, one file per Codex thread;
- :func:`~coven_codex.traces.otel_config.otel_tables`: the ``[otel]`` tables that point Codex at it.
"""

from coven_codex.traces.otel_config import otel_tables
from coven_codex.traces.receiver import OtlpReceiver
from coven_codex.traces.records import TraceRecord
from coven_codex.traces.routing import ThreadRouter
from coven_codex.traces.writer import JsonlWriter, RecordSink

__all__ = ["JsonlWriter", "OtlpReceiver", "RecordSink", "ThreadRouter", "TraceRecord", "otel_tables"]
