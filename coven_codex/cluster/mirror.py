"""What a new owner needs of a conversation, mirrored into Redis as it is written (fenced).

- the session state (:class:`~coven_codex.agent.state.SessionState` as JSON: thread, offsets,
  in-flight and delivered thoughts), saved with every local save, with the daemon id that wrote
  it and its fencing token;
- the conversation's *floor*: the journal position before which each of its thoughts is
  finished (delivered or refused), so a new owner re-reads the journal only from there;
- the Codex thread's rollout file, byte for byte: egress copies each line before it translates
  it, and each state is mirrored only after the copy holds every complete line of its rollout
  (:meth:`~coven_codex.cluster.ownership.Ownership.save_state`), so the copy always holds at
  least what the mirrored state's thread, offsets and delivered thoughts rely on; a new thread's
  rollout replaces the old one's.

Every write is a script that checks the conversation's lease first: a daemon that lost the
lease cannot overwrite what the new owner wrote (:class:`~coven_codex.cluster.leases.LeaseLost`).
:func:`rehydrate` writes the copy back into the new owner's ``CODEX_HOME`` at the same relative
path, where ``thread/resume`` (or ``exec resume``) finds it. Every call waits out a Redis outage
through the journal's :class:`~coven_codex.journal.redis.outage.Reachability` (each one may be
repeated: the writes are idempotent, a report twice is harmless).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from redis.asyncio import Redis

from coven_codex.cluster import scripts
from coven_codex.cluster.keys import ClusterKeys
from coven_codex.cluster.leases import LeaseLost
from coven_codex.journal.atomic import atomic_write
from coven_codex.journal.redis.outage import Reachability


class MirroredState(BaseModel):
    """A conversation's state as its last owner mirrored it."""

    writer: str
    """The daemon id that wrote it."""
    token: int
    state: str
    """The :class:`~coven_codex.agent.state.SessionState` as JSON."""


@dataclass(frozen=True, slots=True)
class MirroredRollout:
    """The copy of a conversation's current rollout: its thread, path under ``CODEX_HOME``, bytes."""

    thread_id: str
    path: str
    data: bytes


REPORT_TTL = 600
"""Seconds a previous owner's rollout report is kept for the new owner."""
BLOCK_MAX = 20.0
"""One blocking wait for a report lasts at most this (seconds: below the Redis client's socket
timeout, ``journal.redis.journal.SOCKET_TIMEOUT``); a longer wait is several."""
UNCLAIMED_REPORT_TTL = 120
"""Seconds a report made while nobody holds the lease waits for the next claim (a live daemon
claims a conversation nobody holds within a lease time and a sweep round)."""


def _parse_report(raw: object, daemon_id: str) -> MirroredRollout | None:
    """A report as :meth:`Mirror.report` writes it (sender, path, data) when ``daemon_id`` made it."""
    sender, _, rest = (raw if isinstance(raw, bytes) else str(raw).encode()).partition(b"\n")
    if sender.decode(errors="replace") != daemon_id:
        return None
    path, _, data = rest.partition(b"\n")
    return MirroredRollout("", path.decode(errors="replace"), data)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def relative_rollout_path(codex_home: Path, rollout: Path) -> str:
    """Where ``rollout`` lies under ``CODEX_HOME`` (``sessions/YYYY/MM/DD/rollout-….jsonl``)."""
    try:
        return str(rollout.resolve().relative_to(codex_home.resolve()))
    except ValueError:
        return f"sessions/{rollout.name}"


class Mirror:
    """Fenced mirror writes and reads for one cluster (module docstring)."""

    def __init__(self, redis: Redis, keys: ClusterKeys, *, daemon_id: str, reachability: Reachability) -> None:
        self._redis = redis
        self._reachability = reachability
        self._keys = keys
        self.daemon_id = daemon_id
        self._save = redis.register_script(scripts.SAVE_STATE)
        self._append = redis.register_script(scripts.APPEND_ROLLOUT)
        self._report = redis.register_script(scripts.REPORT)
        self._copied: dict[str, tuple[str, int]] = {}
        """Conversation → (thread, length of its rollout copy), as far as this daemon wrote it."""

    async def save_state(self, conversation: str, token: int, state_json: str, floor: str) -> None:
        """Mirror the state and the floor; :class:`LeaseLost` when ``token`` no longer holds the lease."""
        k = self._keys

        async def run() -> Any:
            return await self._save(
                keys=[k.lease(conversation), k.state(conversation), k.floor(conversation)],
                args=[token, self.daemon_id, state_json, floor],
            )

        ok = await self._reachability.call(run)
        if not int(ok):
            raise LeaseLost(conversation)

    async def load_state(self, conversation: str) -> MirroredState | None:
        """The mirrored state, or None when no daemon ever mirrored this conversation."""

        async def run() -> Any:
            return await self._redis.hgetall(self._keys.state(conversation))

        found = await self._reachability.call(run)
        if not found:
            return None
        fields = {_text(key): _text(value) for key, value in found.items()}
        return MirroredState.model_validate(fields)

    async def load_floor(self, conversation: str) -> str | None:
        """The conversation's floor (a journal position's text), or None when none is known."""

        async def run() -> Any:
            return await self._redis.get(self._keys.floor(conversation))

        value = await self._reachability.call(run)
        return None if value is None else _text(value)

    async def copy_rollout(
        self, conversation: str, token: int, *, thread_id: str, codex_home: Path, rollout: Path, end: int
    ) -> None:
        """Make the copy of ``rollout`` hold at least its first ``end`` bytes (appending what it lacks)."""
        thread, length = self._copied.get(conversation, ("", -1))
        if thread == thread_id and length >= end:
            return
        if thread != thread_id:
            length = 0  # (a new thread: the script replaces the old copy)
        path = relative_rollout_path(codex_home, rollout)
        k = self._keys
        while True:
            data = await asyncio.to_thread(_read_range, rollout, length, end)

            async def run(length: int = length, data: bytes = data) -> Any:
                return await self._append(
                    keys=[k.lease(conversation), k.rollout(conversation), k.rollout_data(conversation)],
                    args=[token, thread_id, path, length, data],
                )

            result = int(await self._reachability.call(run))
            if result < 0:
                raise LeaseLost(conversation)
            self._copied[conversation] = (thread_id, result)
            if result >= end or (len(data) < end - length and result == length + len(data)):
                return  # copied (or the file holds no more yet)
            # Our idea of the copy's length was wrong: this daemon's other copier (egress, the state's
            # mirror) appended meanwhile. Go on from where the copy is; every round it grows or we return.
            length = result

    async def report(self, conversation: str, path: str, data: bytes) -> None:
        """Tell the new owner what rollout we have on our disk for ``conversation`` (we lost it while a
        thought was in flight: our copy may lack the line that says Codex received it). Unfenced, for
        the holder of the lease now (:data:`scripts.REPORT`), kept for :data:`REPORT_TTL` seconds; it
        uses it only when it extends the copy; while nobody holds the lease, for the next claimant."""
        prefix = self._keys.report(conversation, "")
        report = f"{self.daemon_id}\n{path}\n".encode() + data

        async def run() -> Any:
            return await self._report(
                keys=[self._keys.lease(conversation), self._keys.reported(conversation, self.daemon_id)],
                args=[prefix, report, REPORT_TTL, UNCLAIMED_REPORT_TTL],
            )

        await self._reachability.call(run)

    async def kept_report(self, conversation: str, daemon_id: str) -> MirroredRollout | None:
        """The newest report ``daemon_id`` made of ``conversation`` (within :data:`REPORT_TTL`), whoever
        held the lease then; None when it made none. Not consumed: the caller uses it only when it
        extends its copy (a report made before the copy grew past it says nothing new)."""

        async def run() -> Any:
            return await self._redis.get(self._keys.reported(conversation, daemon_id))

        raw = await self._reachability.call(run)
        if raw is None:
            return None
        return _parse_report(raw, daemon_id)

    async def await_report(self, conversation: str, token: int, daemon_id: str, wait: float) -> MirroredRollout | None:
        """Wait (blocking in Redis, at most ``wait`` seconds) for ``daemon_id``'s report to the holder of
        ``token`` (our claim's: reports to an earlier or later holder are not ours); None if none came."""
        key = self._keys.report(conversation, token)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while (left := deadline - loop.time()) > 0:

            async def run(left: float = left) -> Any:
                return await self._redis.blpop([key], timeout=max(1, round(min(left, BLOCK_MAX))))

            found = await self._reachability.call(run)
            if not found:
                continue
            report = _parse_report(found[1], daemon_id)
            if report is not None:
                return report
        return None

    def forget(self, conversation: str) -> None:
        """We no longer own ``conversation``: what we knew of its copy may go stale."""
        self._copied.pop(conversation, None)

    async def load_rollout(self, conversation: str) -> MirroredRollout | None:
        """The copy of the conversation's current rollout, or None when there is none."""
        k = self._keys

        async def run() -> list[Any]:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hgetall(k.rollout(conversation))
                pipe.get(k.rollout_data(conversation))
                return await pipe.execute()

        meta, data = await self._reachability.call(run)
        if not meta:
            return None
        fields = {_text(key): _text(value) for key, value in meta.items()}
        return MirroredRollout(fields["thread"], fields["path"], bytes(data or b""))


def _read_range(path: Path, start: int, end: int) -> bytes:
    with path.open("rb") as handle:
        handle.seek(start)
        return handle.read(max(0, end - start))


@dataclass(frozen=True, slots=True)
class Rehydrated:
    """Where :func:`rehydrate` put a rollout, and whether it wrote over a local file with other content."""

    path: Path
    replaced: bool
    """A local file that lacked some of the copy was replaced (another daemon continued the thread):
    a Codex process of ours that still has the thread loaded holds the old file and an old history."""


def rehydrate(codex_home: Path, rollout: MirroredRollout) -> Rehydrated:
    """Write the copy into ``codex_home`` at its relative path (atomically); where, and whether it replaced one.

    A local file that starts with the copy is kept, the same file (this daemon wrote it and the copy
    is as long or lags behind it): the longer record is the truer one, and a Codex process that has
    the thread loaded keeps appending to that very file.
    """
    relative = Path(rollout.path)
    if relative.is_absolute() or ".." in relative.parts:
        relative = Path("sessions") / relative.name
    target = codex_home / relative
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        local = target.read_bytes()
    except FileNotFoundError:
        local = b""
    if local and local.startswith(rollout.data):
        return Rehydrated(target, replaced=False)
    atomic_write(target, rollout.data, durable=True)
    return Rehydrated(target, replaced=bool(local))
