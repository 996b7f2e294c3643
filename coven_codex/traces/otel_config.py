"""The ``[otel]`` config that makes Codex export to the local receiver (docs/exec.md, Traces).

Verified with the real CLIs (docs/exec.md has the table): both 0.47.0 and 0.169.0 read
``[otel] exporter = {otlp-http = {endpoint, protocol, headers}}`` and post their log records to
``endpoint``; 0.47.0 refuses to start when ``headers`` is missing, so it is always written. Only
0.169.0 (of the two) also exports spans, configured the same way under ``trace_exporter``; 0.47.0
ignores that key. ``protocol = "binary"`` is OTLP/protobuf, several times smaller than JSON for
Codex's spans.
"""

from __future__ import annotations

from typing import Any

from coven_codex.codex.config_merge import KeyPath
from coven_codex.codex.version import CodexVersion

PROTOCOL = "binary"


def otel_tables(base_url: str) -> dict[KeyPath, dict[str, Any]]:
    """The tables coven owns in the isolated config when traces are collected at ``base_url``."""

    def exporter(path: str) -> dict[str, Any]:
        return {"otlp-http": {"endpoint": f"{base_url}{path}", "protocol": PROTOCOL, "headers": {}}}

    return {("otel", "exporter"): exporter("/v1/logs"), ("otel", "trace_exporter"): exporter("/v1/traces")}


def exported_signals(version: CodexVersion) -> tuple[str, ...]:
    """What ``version`` exports over OTLP when configured by :func:`otel_tables` (empty: nothing)."""
    if version.supports_otel_traces:
        return ("logs", "traces")
    if version.supports_otel_logs:
        return ("logs",)
    return ()


def export_notice(version: CodexVersion) -> str | None:
    """What to tell the user when ``version`` exports less than everything (``None``: nothing to say)."""
    signals = exported_signals(version)
    if not signals:
        return (
            f"Codex {version} exports no OpenTelemetry data coven-codex can collect (log export was verified "
            "from 0.47.0 on); traces.jsonl will stay empty. Upgrade Codex (npm install -g @openai/codex) to "
            "collect traces"
        )
    if "traces" not in signals:
        return (
            f"Codex {version} exports only log records, no spans (spans were verified from 0.169.0 on); "
            "traces.jsonl will hold its logs"
        )
    return None
