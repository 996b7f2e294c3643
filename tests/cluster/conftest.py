"""A client of the session's real ``redis-server`` (tests/conftest.py), and a key space of the test's own."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from coven_codex.cluster.keys import ClusterKeys
from coven_codex.testing.redis_server import RedisServer


@pytest.fixture
async def redis_client(redis_server: RedisServer) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_server.url())
    yield client
    await client.aclose()


@pytest.fixture
def cluster_keys() -> ClusterKeys:
    """Keys no other test uses (the Redis server is shared by the session)."""
    return ClusterKeys(f"test-{uuid.uuid4().hex[:12]}")
