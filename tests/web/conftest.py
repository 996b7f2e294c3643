"""Fixtures for the web page's tests."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from web_helpers import WebServer


@pytest.fixture
async def web_server(tmp_path: Path) -> AsyncIterator[WebServer]:
    """A page server on ``tmp_path/journal.jsonl`` (started by the test)."""
    server = WebServer(tmp_path / "journal.jsonl", tmp_path)
    yield server
    if server.process is not None and server.process.returncode is None:
        await server.kill9()


@pytest.fixture
def chromium_path() -> str:
    """Debian's Chromium; scripts/setup.sh installs it."""
    path = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).exists():
        raise RuntimeError("chromium is not installed; scripts/setup.sh installs it (apt-get install chromium)")
    return path


def _agent_fixtures() -> object:
    """The agent suite's fixtures (the daemon harness and the scripted model server), shared."""
    agent = Path(__file__).resolve().parent.parent / "agent"
    if str(agent) not in sys.path:
        sys.path.insert(0, str(agent))
    spec = importlib.util.spec_from_file_location("web_agent_fixtures", agent / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_agent = _agent_fixtures()
model_server = _agent.model_server  # type: ignore[attr-defined]
harness_factory = _agent.harness_factory  # type: ignore[attr-defined]
