"""The session manager: one :class:`Session` per conversation, created on its first thought.

It is the ingress :class:`~coven_codex.agent.ingress.Router`: routing is synchronous (a put on
the session's inbox), so the journal reader never waits for a conversation. Sessions run as
tasks of the daemon's task group.
"""

from __future__ import annotations

import asyncio
import logging

from coven_codex.agent.services import SessionServices
from coven_codex.agent.session import Session
from coven_codex.agent.state import SessionState
from coven_codex.agent.storage import storage_failure
from coven_codex.entries import ApprovalEntry, CancelEntry, ThoughtEntry

log = logging.getLogger(__name__)


class SessionManager:
    def __init__(self, services: SessionServices, group: asyncio.TaskGroup) -> None:
        self._services = services
        self._group = group
        self.sessions: dict[str, Session] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def restore(self, state: SessionState) -> Session:
        """Bring back a conversation of a previous run (its egress resumes at once)."""
        return self._start(state)

    def _start(self, state: SessionState) -> Session:
        session = Session(state, self._services)
        self.sessions[state.conversation] = session
        self._tasks[state.conversation] = self._group.create_task(
            self._supervise(session), name=f"session:{state.conversation}")
        return session

    async def _supervise(self, session: Session) -> None:
        """Run a session; a bug in one conversation must not take the others down."""
        while True:
            try:
                await session.run()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failure = storage_failure(exc)
                if failure is not None and self._services.on_storage_failure is not None:
                    self._services.on_storage_failure(failure)  # the daemon stops; restarting cannot help
                    return
                log.exception("conversation %r: session failed; restarting it", session.conversation)
                await session.report_crash(exc)
                await asyncio.sleep(max(self._services.settings.restart_backoff, 1.0))

    def _session(self, conversation: str) -> Session:
        session = self.sessions.get(conversation)
        if session is None:
            log.info("new conversation %r", conversation)
            session = self._start(self._services.store.load(conversation))
        return session

    # -- Router ------------------------------------------------------------------------------------
    def route_thought(self, entry: ThoughtEntry, position: int) -> bool:
        return self._session(entry.conversation).offer_thought(entry, position)

    def route_cancel(self, entry: CancelEntry, *, live: bool) -> None:
        session = self.sessions.get(entry.conversation)
        if not live or session is None:
            log.info("cancel %s for %r: no turn of this run to cancel", entry.id, entry.conversation)
            return
        session.offer_cancel(entry)

    def route_approval(self, entry: ApprovalEntry, *, live: bool) -> None:
        session = self.sessions.get(entry.conversation)
        if not live or session is None:
            log.info("approval %s for %r: the request did not survive a restart", entry.id, entry.conversation)
            return
        session.offer_approval(entry)

    # -- shutdown ----------------------------------------------------------------------------------
    async def shutdown(self, *, grace: float, drain: float) -> None:
        """Stop turns (waiting up to ``grace``), end every Codex tree, drain egress, save state."""
        sessions = list(self.sessions.values())
        await asyncio.gather(*(s.stop_turn() for s in sessions))
        await asyncio.gather(*(s.wait_turn_over(grace) for s in sessions))
        await asyncio.gather(*(s.close() for s in sessions))
        await asyncio.gather(*(s.drain_egress(drain) for s in sessions))
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        for session in sessions:
            await session.final_save()
