"""The journal backends every contract test runs against."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from journal_backends import Backend, FileBackend, MemoryBackend, RedisBackend, SharedBackend

from coven_codex.journal import Durability
from coven_codex.testing.redis_server import RedisServer

FILE_DURABILITIES: dict[str, Durability] = {"file": "batched", "file-always": "always", "file-never": "never"}


@pytest.fixture(params=["file", "file-always", "file-never", "memory", "redis"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path, redis_server: RedisServer) -> AsyncIterator[Backend]:
    """Every journal backend (and every file durability)."""
    name: str = request.param
    if name == "memory":
        yield MemoryBackend()
    elif name == "redis":
        redis = RedisBackend(redis_server.url(key=f"journal-{uuid.uuid4().hex}"))
        yield redis
        await redis.aclose()
    else:
        yield FileBackend(tmp_path / "journal.jsonl", FILE_DURABILITIES[name])


@pytest.fixture(params=["file", "redis"])
async def shared_backend(
    request: pytest.FixtureRequest, tmp_path: Path, redis_server: RedisServer
) -> AsyncIterator[SharedBackend]:
    """Backends that separate processes can open at once."""
    if request.param == "redis":
        redis = RedisBackend(redis_server.url(key=f"journal-{uuid.uuid4().hex}"))
        yield redis
        await redis.aclose()
    else:
        yield FileBackend(tmp_path / "journal.jsonl")
