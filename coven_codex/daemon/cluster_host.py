"""The running daemon as the cluster's ownership sees it (:class:`~coven_codex.cluster.ownership.SessionHost`).

The cluster knows the daemon only through that Protocol; :class:`DaemonHost` implements it over the
public parts of the running daemon (:class:`HostedDaemon`, which :class:`~coven_codex.daemon.daemon.Daemon`
is), so neither the cluster nor this module imports the daemon.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Protocol

from coven_codex.agent.ingress import Ingress
from coven_codex.agent.recovery import codex_received
from coven_codex.agent.services import DriverFactory, SessionServices
from coven_codex.agent.state import SessionState, StateStore
from coven_codex.cluster.turns import abandoned_turn_end, unfinished_turn
from coven_codex.codex.appserver import AppServerPool
from coven_codex.conversation.manager import SessionManager
from coven_codex.journal import JournalItem, JournalRecord, Position


class HostedDaemon(Protocol):
    """What :class:`DaemonHost` uses of the running daemon."""

    manager: SessionManager | None
    ingress: Ingress | None
    services: SessionServices | None
    make_driver: DriverFactory
    store: StateStore

    async def recover_in_flight(self, state: SessionState, states: dict[str, SessionState]) -> None:
        """Resolve ``state``'s in-flight thought as start-up recovery does (``states``: every known one)."""
        ...

    def storage_failed(self, failure: BaseException) -> None:
        """Stop the daemon in order because its storage failed, saying so once."""
        ...


class DaemonHost:
    """Adopting and dropping conversations in a running daemon."""

    def __init__(self, daemon: HostedDaemon, start: Position) -> None:
        self._daemon = daemon
        self._start = start

    async def recover(self, state: SessionState) -> None:
        """Resolve an in-flight thought against the (rehydrated) rollout, as a restart does."""
        manager = self._daemon.manager
        states = {c: s.state for c, s in manager.sessions.items()} if manager is not None else {}
        states[state.conversation] = state
        await self._daemon.recover_in_flight(state, states)

    async def end_lost_turn(self, state: SessionState) -> None:
        """A turn the previous owner started and never ended (it was lost with it) ends here."""
        services = self._daemon.services
        if services is None or state.thread_id is None or state.rollout_path is None:
            return
        turn = await asyncio.to_thread(unfinished_turn, Path(state.rollout_path), state.conversation, state.thread_id)
        if turn is not None:
            entry = abandoned_turn_end(state.thread_id, turn, state.reply_to)
            entry.conversation = state.conversation
            await services.writer.append(entry)

    async def received(self, state: SessionState) -> bool:
        """Whether ``state``'s rollout shows that Codex received its in-flight thought."""
        if state.in_flight is None or state.rollout_path is None:
            return False
        rollout, in_flight = Path(state.rollout_path), state.in_flight
        by_client_id = self._daemon.make_driver.plan.records_client_id
        return await asyncio.to_thread(codex_received, rollout, in_flight, by_client_id=by_client_id)

    def start_session(self, state: SessionState) -> None:
        """Start the conversation's session (its egress resumes at once)."""
        assert self._daemon.manager is not None
        self._daemon.manager.restore(state)

    def serving(self, conversation: str) -> bool:
        """Whether a session of ``conversation`` runs here or is still being stopped."""
        return self._daemon.manager is not None and self._daemon.manager.serves(conversation)

    async def stop_session(self, conversation: str) -> None:
        """Stop the session without writing; its pending positions are given back."""
        if self._daemon.manager is not None:
            await self._daemon.manager.drop(conversation)

    async def replay(self, items: list[JournalItem]) -> None:
        """Route the conversation's items from its floor, as read before this run."""
        assert self._daemon.ingress is not None
        await self._daemon.ingress.replay([i for i in items if isinstance(i, JournalRecord)])

    @property
    def store(self) -> StateStore:
        """The daemon's state store."""
        return self._daemon.store

    async def unload_thread(self, thread_id: str) -> None:
        """End the shared Codex app-server that has ``thread_id`` loaded, if one runs (the exec driver
        starts a process per turn, which reads the rollout afresh)."""
        pool = getattr(self._daemon.make_driver, "pool", None)
        if isinstance(pool, AppServerPool):
            await pool.unload(thread_id)

    def storage_failed(self, failure: BaseException) -> None:
        """The journal (Redis) failed for good: the daemon stops in order (as when its reader fails)."""
        self._daemon.storage_failed(failure)

    def read_position(self) -> Position:
        """Where the journal reader is (before it starts: where it will start)."""
        ingress = self._daemon.ingress
        return ingress.cursor.read_end if ingress is not None else self._start
