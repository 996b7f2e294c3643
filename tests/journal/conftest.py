"""The journal backends every contract test runs against."""

from __future__ import annotations

from pathlib import Path

import pytest
from journal_backends import Backend, FileBackend, MemoryBackend, SharedBackend

from coven_codex.journal import Durability

FILE_DURABILITIES: dict[str, Durability] = {"file": "batched", "file-always": "always", "file-never": "never"}


@pytest.fixture(params=["file", "file-always", "file-never", "memory"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """Every journal backend (and every file durability)."""
    name: str = request.param
    if name == "memory":
        return MemoryBackend()
    return FileBackend(tmp_path / "journal.jsonl", FILE_DURABILITIES[name])


@pytest.fixture(params=["file"])
def shared_backend(request: pytest.FixtureRequest, tmp_path: Path) -> SharedBackend:
    """Backends that separate processes can open at once."""
    return FileBackend(tmp_path / "journal.jsonl")
