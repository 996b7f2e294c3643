"""Fixtures for the Slack adapter's end-to-end tests: the agent suite's harness and the fake Slack."""

from __future__ import annotations

from agent_fixtures import agent_fixtures

_agent = agent_fixtures("slack", "adapters")
model_server = _agent.model_server
harness_factory = _agent.harness_factory
