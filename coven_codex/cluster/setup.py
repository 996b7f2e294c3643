"""Joining a cluster: this daemon's id, its Redis connection, its :class:`Ownership`."""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
from collections.abc import AsyncIterator
from pathlib import Path

from redis.asyncio import Redis

from coven_codex.cluster.keys import ClusterKeys
from coven_codex.cluster.node import ClusterNode
from coven_codex.cluster.ownership import Ownership
from coven_codex.journal import Journal
from coven_codex.journal.atomic import atomic_write

ID_FILE = "cluster-id"
"""In the state directory: this daemon's id in the cluster, made once."""
SOCKET_TIMEOUT = 30.0


def daemon_id(state_dir: Path) -> str:
    """This state directory's daemon id (``<host>-<random>``), made on first use and kept there.

    The id is what lets a restarted daemon take its own leases back at once: only one process can
    hold the state directory's lock, so two live daemons never share an id.
    """
    path = state_dir / ID_FILE
    with contextlib.suppress(FileNotFoundError):
        text = path.read_text(encoding="utf-8").strip()
        if text:
            return text[:60]
    host = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in socket.gethostname())[:40] or "daemon"
    made = f"{host}-{secrets.token_hex(4)}"
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    atomic_write(path, made.encode("utf-8") + b"\n", durable=True)
    os.chmod(path, 0o600)
    return made


@contextlib.asynccontextmanager
async def joined(
    *, url: str, namespace: str, journal: Journal, state_dir: Path, codex_home: Path, lease_time: float
) -> AsyncIterator[Ownership]:
    """The :class:`Ownership` of this daemon in the cluster at ``url`` (keys under ``namespace``)."""
    client = Redis.from_url(url, socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=5.0)
    try:
        node = ClusterNode(client, ClusterKeys(namespace), daemon_id=daemon_id(state_dir), lease_time=lease_time)
        yield Ownership(node, journal, codex_home)
    finally:
        await client.aclose()
