"""Trace capture: a loopback OTLP/HTTP receiver for what Codex exports, written as JSONL (docs/exec.md, Traces).

- :class:`~coven_codex.traces.receiver.OtlpReceiver`: serves ``/v1/logs``, ``/v1/traces`` and
  ``/v1/metrics`` on 127.0.0.1, JSON and protobuf encodings;
- :class:`~coven_codex.traces.writer.JsonlWriter`: one record a line, optionally rotated by size;
- :class:`~coven_codex.traces.routing.ThreadRouter`: the daemon's sink, one file per Codex thread;
- :func:`~coven_codex.traces.otel_config.otel_tables`: the ``[otel]`` tables that point Codex at it.

Import each from its module: this package imports nothing, so that ``otel_config`` (which ``run``
and ``validate`` need) does not load the receiver's OTLP/protobuf decoding, which only
``collect_traces`` uses.
"""
