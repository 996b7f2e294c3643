"""Fixtures for the Telegram adapter's end-to-end tests: the agent suite's harness and the fake Bot API."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
for folder in (HERE.parent / "agent", HERE.parent / "adapters"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))


def _agent_fixtures() -> object:
    """The agent suite's fixtures (the daemon harness and the scripted model server), shared."""
    spec = importlib.util.spec_from_file_location("telegram_agent_fixtures", HERE.parent / "agent" / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_agent = _agent_fixtures()
model_server = _agent.model_server  # type: ignore[attr-defined]
harness_factory = _agent.harness_factory  # type: ignore[attr-defined]
