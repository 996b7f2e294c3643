"""The ``[otel]`` config that makes Codex export to the local receiver (docs/exec.md, Traces).

Verified with the real CLIs (docs/exec.md has the table): both 0.47.0 and 0.169.0 read
``[otel] exporter = {otlp-http = {endpoint, protocol, headers}}`` and post their log records to
``endpoint``, with the ``headers`` given (verified with 0.169.0: the receiver's secret header
arrives on every export); 0.47.0 refuses to start when ``headers`` is missing. Only
0.169.0 (of the two) also exports spans, configured the same way under ``trace_exporter``; 0.47.0
ignores that key. ``protocol = "binary"`` is OTLP/protobuf, several times smaller than JSON for
Codex's spans.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from coven_codex.codex.config_merge import KeyPath
from coven_codex.codex.version import CodexVersion

PROTOCOL = "binary"
SECRET_HEADER = "x-coven-otlp-secret"
"""The header carrying a receiver's per-run secret; a post without it is refused (401)."""


@dataclass(frozen=True, slots=True)
class OtlpTarget:
    """Where Codex posts its exports (``http://127.0.0.1:PORT``) and the headers it must send."""

    base_url: str
    headers: Mapping[str, str]


def otel_tables(target: OtlpTarget) -> dict[KeyPath, dict[str, Any]]:
    """The tables coven owns in the isolated config when traces are collected at ``target``."""

    def exporter(path: str) -> dict[str, Any]:
        endpoint = f"{target.base_url}{path}"
        return {"otlp-http": {"endpoint": endpoint, "protocol": PROTOCOL, "headers": dict(target.headers)}}

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
