"""Fixtures for the web page's tests."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from agent_fixtures import agent_fixtures
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


_agent = agent_fixtures("web")
model_server = _agent.model_server
harness_factory = _agent.harness_factory
