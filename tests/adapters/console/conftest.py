"""Fixtures for the console's end-to-end tests: the agent suite's harness (the daemon, the real Codex
CLI, the scripted model server)."""

from __future__ import annotations

from agent_fixtures import agent_fixtures

_agent = agent_fixtures("console", "adapters")
model_server = _agent.model_server
harness_factory = _agent.harness_factory
