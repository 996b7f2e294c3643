"""The adversarial suite: hostile spells, forged state, planted interpreters, rotation, stopped
Codex, poison thoughts, fd and memory bounds. Each module is named ``test_adversarial_<area>.py``.

The helpers and fixtures of the agent and MCP suites are shared here rather than copied.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
for _sub in ("agent", "mcp", "codex", "traces", "attachments"):
    if str(TESTS / _sub) not in sys.path:
        sys.path.insert(0, str(TESTS / _sub))


def _load(name: str, path: Path) -> object:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_agent = _load("adversarial_agent_fixtures", TESTS / "agent" / "conftest.py")
_mcp = _load("adversarial_mcp_fixtures", TESTS / "mcp" / "conftest.py")

model_server = _agent.model_server  # type: ignore[attr-defined]
harness_factory = _agent.harness_factory  # type: ignore[attr-defined]
registry = _mcp.registry  # type: ignore[attr-defined]
server = _mcp.server  # type: ignore[attr-defined]
