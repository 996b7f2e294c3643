"""The daemon's start path imports only what it needs before it serves (issue 18: restart → first
reply ≤ 2 s; docs/performance.md, "Restart on a long journal").

``coven-codex run`` imports its subcommand module and the bootstrap; what only an optional
setting uses (trace collection, webhooks in the daemon, a Redis journal, a cluster) or another
command uses (the web page, the chat adapters, ``exec``) is imported where it is used. A fresh
interpreter shows what the start path imports: measured in a subprocess, so nothing this test
process imported counts.
"""

from __future__ import annotations

import json
import subprocess
import sys

NOT_ON_THE_START_PATH = (
    # optional extras: other commands, or settings that are off by default
    "redis",
    "starlette",
    "uvicorn",
    "websockets",
    "discord",
    "slack_bolt",
    "slack_sdk",
    "aiohttp",
    "markdown_it",
    "mcp",  # the MCP SDK (tests only); coven's own server is coven_codex.mcp
    # collect_traces only: the OTLP receiver and its protobuf decoding
    "google.protobuf",
    "opentelemetry",
    "coven_codex.traces.receiver",
    "coven_codex.traces.records",
    # [webhooks] in_daemon only
    "coven_codex.webhooks.service",
    "coven_codex.webhooks.sender",
    "coven_codex.webhooks.http",
    "httpx",
    # a Redis journal / cluster = true only
    "coven_codex.journal.redis.journal",
    "coven_codex.cluster.ownership",
    "coven_codex.cluster.setup",
    # other commands
    "coven_codex.adapters.web.app",
    "coven_codex.adapters.console",
    "coven_codex.oneshot",
)
"""Modules (and their submodules) the daemon's start path must not import."""

PROBE = """
import json, sys
from coven_codex.cli.main import build_parser
build_parser(only="run")  # what `coven-codex run ...` imports before it runs
import coven_codex.daemon.bootstrap
print(json.dumps(sorted(sys.modules)))
"""


def test_run_start_path_imports_no_optional_module() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True)
    loaded: list[str] = json.loads(done.stdout)
    assert "coven_codex.daemon.bootstrap" in loaded and "coven_codex.cli.run" in loaded  # the probe did import it
    unexpected = sorted(
        name for name in loaded for banned in NOT_ON_THE_START_PATH if name == banned or name.startswith(banned + ".")
    )
    assert not unexpected, f"the daemon's start path imports {unexpected}; import them where they are used"


NOT_ON_THE_JOB_PATH = ("coven_codex.agent.services", "coven_codex.agent.egress", "coven_codex.codex.drivers")
"""The daemon's own modules: ``coven-codex job`` only writes and reads the journal, and ran as a process many
times (a job's submit, status, result, cancel) it must not pay the daemon's imports (about 0.5 s a start)."""

JOB_PROBE = """
import json, sys
from coven_codex.cli.main import build_parser
build_parser(only="job")  # what `coven-codex job ...` imports before it runs
print(json.dumps(sorted(sys.modules)))
"""


def test_the_job_command_imports_none_of_the_daemon() -> None:
    done = subprocess.run([sys.executable, "-c", JOB_PROBE], capture_output=True, text=True, timeout=120, check=True)
    loaded: list[str] = json.loads(done.stdout)
    assert "coven_codex.jobs.client" in loaded  # the probe did import it
    unexpected = sorted(
        name for name in loaded for banned in NOT_ON_THE_JOB_PATH if name == banned or name.startswith(banned + ".")
    )
    assert not unexpected, f"`coven-codex job` imports {unexpected}; import them where they are used"
