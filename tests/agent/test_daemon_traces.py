"""``run --collect-traces``: the daemon captures Codex's own OpenTelemetry log records, one file per
Codex thread under ``<state_dir>/traces/`` (both Codex versions, real daemon, real CLI)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_harness import AgentHarness, replies

from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.traces.records import TraceRecord

pytestmark = pytest.mark.codex

Factory = Callable[[Path, ScriptedModelServer], AgentHarness]


def conversation_ids(record: TraceRecord) -> set[str]:
    found = set()
    for resource in record.payload["resourceLogs"]:  # type: ignore[union-attr]
        for scope in resource["scopeLogs"]:  # type: ignore[index]
            for log_record in scope["logRecords"]:  # type: ignore[index]
                for attribute in log_record.get("attributes", []):  # type: ignore[union-attr]
                    if attribute["key"] == "conversation.id":  # type: ignore[index]
                        found.add(attribute["value"]["stringValue"])  # type: ignore[index]
    return found


async def test_the_daemon_writes_each_threads_log_records_to_its_own_file(
    codex_bin: Path, model_server: ScriptedModelServer, harness_factory: Factory
) -> None:
    h = harness_factory(codex_bin, model_server)
    daemon = await h.start("--collect-traces")
    await h.think("alpha", "first")
    await h.think("beta", "second")
    await h.wait_for(lambda es: len(replies(es)) >= 2, what="two replies")
    assert await h.stop(daemon) == 0
    traces = h.state_dir / "traces"
    per_thread = sorted(path for path in traces.glob("*.jsonl") if path.name != "codex.jsonl")
    assert len(per_thread) == 2, sorted(p.name for p in traces.iterdir())
    for path in per_thread:
        records = [TraceRecord.model_validate(json.loads(line)) for line in path.read_text().splitlines()]
        assert records and all(record.signal == "logs" for record in records)
        assert set().union(*(conversation_ids(record) for record in records)) == {path.stem}
    assert "collecting Codex's OpenTelemetry export at http://127.0.0.1:" in daemon.log()
