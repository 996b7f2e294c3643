"""The preflight plan: which probes run, in which order, with which bounds."""

from __future__ import annotations

from coven_codex.codex.capabilities import SCHEMA_TIMEOUT
from coven_codex.settings import Settings
from coven_codex.validate import codex_probes as codex
from coven_codex.validate import filesystem_probes as fs
from coven_codex.validate import metrics_probes as metrics
from coven_codex.validate import redis_probes as redis
from coven_codex.validate import scope_probes as scope
from coven_codex.validate import spell_probes as spells
from coven_codex.validate.framework import Outcome, Probe, ProbeContext, run_plan

PLAN: tuple[Probe, ...] = (
    Probe("timeouts", "timeout settings within bounds", fs.probe_timeouts, timeout=1, required=False),
    Probe("workspace", "workspace exists and is writable", fs.probe_workspace, timeout=5),
    Probe("projects", "every [projects] directory lies inside the workspace roots", fs.probe_projects, timeout=5),
    Probe("codex_found", "Codex executable found, not inside the workspace", codex.probe_codex_found, timeout=8),
    Probe("codex_version", "`codex --version` answers", codex.probe_codex_version, timeout=8, needs=("codex_found",)),
    Probe(
        "codex_supported",
        "Codex version supported; driver chosen by its capabilities",
        codex.probe_codex_supported,
        timeout=SCHEMA_TIMEOUT + 5,
        needs=("codex_version",),
    ),
    Probe(
        "traces",
        "what collect_traces captures from this Codex",
        codex.probe_traces,
        timeout=1,
        required=False,
        needs=("codex_version",),
    ),
    Probe("credentials", "credentials for the model provider", codex.probe_credentials, timeout=2),
    Probe(
        "login", "`codex login status`", codex.probe_login, timeout=12, required=False, needs=("codex_version",)
    ),  # a Codex that cannot say its version would only time out here
    Probe("codex_home", "CODEX_HOME writable", fs.probe_codex_home, timeout=5),
    Probe("state_dir", "state folder (cursors, sessions) writable", fs.probe_state_dir, timeout=5),
    Probe("sessions", "Codex sessions folder readable", fs.probe_sessions_folder, timeout=10),
    Probe("journal", "journal path writable", fs.probe_journal, timeout=5),
    Probe("redis", "a Redis journal's server answers, Redis 7.0 or newer", redis.probe_redis, timeout=8),
    Probe(
        "redis_persistence",
        "a Redis journal survives a Redis restart (AOF/RDB)",
        redis.probe_redis_persistence,
        timeout=1,
        required=False,
    ),
    Probe(
        "conversation_state",
        "the state folder and journal identity a start would use",
        scope.probe_conversation_state,
        timeout=10,
    ),
    Probe("metrics_port", "the metrics port can be listened on", metrics.probe_metrics_port, timeout=5),
    Probe("spells", "spells import with valid schemas", spells.probe_spells, timeout=30),
    Probe("shim_version", "the MCP shim starts within 1 s", spells.probe_shim_version, timeout=3),
    Probe("shim_handshake", "socket handshake round trip through a live shim", spells.probe_shim_handshake, timeout=15),
    Probe(
        "config_merge",
        "Codex config merged in a scratch copy and re-parsed",
        codex.probe_config_merge,
        timeout=15,
        needs=("codex_supported",),
    ),
)

RUN_GATES: frozenset[str] = frozenset({"workspace", "codex_home", "state_dir", "journal", "redis", "metrics_port"})
"""The checks ``coven-codex run`` makes before it starts: ``run`` refuses what ``validate`` refuses."""


async def run_refusals(settings: Settings) -> list[Outcome]:
    """The required :data:`RUN_GATES` checks that fail for ``settings``, worded as ``validate`` words them."""
    gates = tuple(probe for probe in PLAN if probe.code in RUN_GATES)
    outcomes = await run_plan(gates, ProbeContext(settings=settings))
    return [outcome for outcome in outcomes if outcome.blocking]
