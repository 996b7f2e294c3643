"""The journal backends every contract test runs against."""

from __future__ import annotations

from pathlib import Path

import pytest
from journal_backends import Backend, FileBackend, MemoryBackend, SharedBackend

from coven_codex.journal import Durability

FILE_DURABILITIES: dict[str, Durability] = {"file": "batched", "file-always": "always", "file-never": "never"}
SEGMENT_BYTES = 1024
"""The "file-segments" backend rolls over every kilobyte: every contract test crosses roll-overs."""


@pytest.fixture(params=["file", "file-always", "file-never", "file-segments", "memory"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """Every journal backend (and every file durability)."""
    name: str = request.param
    if name == "memory":
        return MemoryBackend()
    if name == "file-segments":
        return FileBackend(tmp_path / "journal.jsonl", "batched", segment_bytes=SEGMENT_BYTES)
    return FileBackend(tmp_path / "journal.jsonl", FILE_DURABILITIES[name])


@pytest.fixture(params=["file", "file-segments"])
def shared_backend(request: pytest.FixtureRequest, tmp_path: Path) -> SharedBackend:
    """Backends that separate processes can open at once."""
    if request.param == "file-segments":
        return FileBackend(tmp_path / "journal.jsonl", segment_bytes=SEGMENT_BYTES)
    return FileBackend(tmp_path / "journal.jsonl")
