"""The agent suite's fixtures (the daemon harness and the scripted model server, tests/agent/conftest.py)
for the end-to-end suites of the chat adapters and the web page, loaded once per suite."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

TESTS = Path(__file__).resolve().parent


def agent_fixtures(suite: str, *folders: str) -> ModuleType:
    """tests/agent/conftest.py as the module ``<suite>_agent_fixtures``, with tests/agent and the
    ``folders`` of tests/ (their helpers) importable."""
    for folder in ("agent", *folders):
        if str(TESTS / folder) not in sys.path:
            sys.path.insert(0, str(TESTS / folder))
    spec = importlib.util.spec_from_file_location(f"{suite}_agent_fixtures", TESTS / "agent" / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
