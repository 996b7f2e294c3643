"""Joining a cluster: this daemon's id and its :class:`Ownership`, on the journal's own Redis client."""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
from collections.abc import AsyncIterator
from pathlib import Path

from coven_codex.cluster.keys import ClusterKeys
from coven_codex.cluster.node import ClusterNode
from coven_codex.cluster.ownership import Ownership
from coven_codex.journal.atomic import atomic_write
from coven_codex.journal.redis.journal import RedisJournal

ID_FILE = "cluster-id"
"""In the state directory: this daemon's id in the cluster, made once."""


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
    *, journal: RedisJournal, state_dir: Path, codex_home: Path, lease_time: float
) -> AsyncIterator[Ownership]:
    """The :class:`Ownership` of this daemon in the cluster of ``journal`` (keys under its stream's name).

    The cluster's calls share the journal's client and its
    :class:`~coven_codex.journal.redis.outage.Reachability`: an outage is waited for and said once
    for both, and the journal's owner closes the connections.
    """
    node = ClusterNode(
        journal.client,
        ClusterKeys(journal.location.key),
        daemon_id=daemon_id(state_dir),
        lease_time=lease_time,
        reachability=journal.reachability,
    )
    yield Ownership(node, journal, codex_home)
