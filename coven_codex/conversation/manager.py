"""The session manager: one :class:`Session` per conversation, created on its first thought.

It is the ingress :class:`~coven_codex.agent.ingress.Router`: routing is synchronous (a put on
the session's inbox), so the journal reader never waits for a conversation. Sessions run as
tasks of the daemon's task group.

It is also the one owner of who holds which Codex thread: a conversation holds the thread its
state names (every conversation with a state is restored at start, so the manager sees them
all), and a thread changes hands only through :meth:`SessionManager.hand_thread`, which has the
holder let it go (its state saved without it) before the taker's state names it, so at every
moment, ``kill -9`` included, at most one state names a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from coven_codex.agent.lease_lost import lease_lost
from coven_codex.agent.services import SessionServices
from coven_codex.agent.state import SessionState
from coven_codex.agent.storage import storage_failure
from coven_codex.codex.process import KILL_WAIT, PIPE_WAIT, end_all_trees
from coven_codex.conversation.messages import Release
from coven_codex.conversation.session import Session
from coven_codex.entries import ApprovalEntry, CancelEntry, ResetEntry, SettingsEntry, ThoughtEntry
from coven_codex.journal import Position
from coven_codex.support.backoff import MAX_BACKOFF, backoff
from coven_codex.support.limits import cut

log = logging.getLogger(__name__)

KILL_PHASE = KILL_WAIT + PIPE_WAIT
"""Shutdown, after ``kill_grace``: killing what is left and letting the sessions finish closing."""
EGRESS_DRAIN = 2.0
"""Shutdown, then: how long egress may take to write the last rollout lines to the journal."""
SHUTDOWN_SLACK = 5.0
"""Shutdown takes at most ``kill_grace`` plus this (``KILL_PHASE + EGRESS_DRAIN`` and the saves);
stated in ``docs/operations.md``."""


RELEASE_SLACK = 10.0
"""A conversation asked to let its thread go does so within ``kill_grace`` (its turn interrupted, Codex
closed) plus this (its rollout's last lines, a save); a taker waits no longer."""

CRASH_BACKOFF_BASE = 1.0
"""The first wait (seconds) before a crashed session runs again; it doubles up to the backoff limit."""


class SessionManager:
    """Creates, supervises and shuts down the sessions (module docstring)."""

    def __init__(self, services: SessionServices, group: asyncio.TaskGroup) -> None:
        self._services = services
        self._group = group
        self.sessions: dict[str, Session] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._stopping: set[str] = set()
        """Conversations whose session :meth:`drop` is still stopping (letting its Codex thread go)."""

    def serves(self, conversation: str) -> bool:
        """Whether a session of ``conversation`` runs here or is still being stopped."""
        return conversation in self.sessions or conversation in self._stopping

    def restore(self, state: SessionState) -> Session:
        """Bring back a conversation of a previous run (its egress resumes at once)."""
        return self._start(state)

    def _start(self, state: SessionState) -> Session:
        session = Session(state, self._services)
        self.sessions[state.conversation] = session
        self._tasks[state.conversation] = self._group.create_task(
            self._supervise(session), name=f"session:{state.conversation}"
        )
        return session

    async def _supervise(self, session: Session) -> None:
        """Run a session; a bug in one conversation must not take the others down.

        A session that keeps failing is restarted after a growing wait (the common backoff,
        from ``max(restart_backoff, 1 s)`` up to a minute); once it has run longer than that limit
        without failing, the count starts over. The traceback is logged for the first failure of
        a series, the repeats in one line each.
        """
        crashes = 0
        while True:
            started = time.monotonic()
            try:
                await session.run()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if lease_lost(exc) and self._services.on_lease_lost is not None:
                    # A write was refused: another daemon holds the conversation now (docs/distributed.md).
                    self._services.on_lease_lost(session.conversation)
                    return
                failure = storage_failure(exc)
                if failure is not None and self._services.on_storage_failure is not None:
                    self._services.on_storage_failure(failure)  # the daemon stops; restarting cannot help
                    return
                if time.monotonic() - started > MAX_BACKOFF:
                    crashes = 0
                    session.ran_well()
                crashes += 1
                delay = backoff(max(self._services.settings.restart_backoff, CRASH_BACKOFF_BASE), crashes)
                name = cut(session.conversation)
                if crashes == 1:
                    log.exception("conversation %r: session failed; restarting it in %.1fs", name, delay)
                else:
                    log.error(
                        "conversation %r: session failed again (%d in a row: %s); restarting it in %.1fs",
                        name,
                        crashes,
                        cut(repr(exc), 200),
                        delay,
                    )
                await session.report_crash(exc)
                await asyncio.sleep(delay)

    def _session(self, conversation: str) -> Session:
        session = self.sessions.get(conversation)
        if session is None:
            log.info("new conversation %r", cut(conversation))
            session = self._start(self._services.store.load(conversation))
        return session

    async def drop(self, conversation: str) -> None:
        """Stop a conversation's session for good without writing (another daemon serves it now)."""
        session = self.sessions.pop(conversation, None)
        task = self._tasks.pop(conversation, None)
        if session is None and task is None:
            return
        self._stopping.add(conversation)
        try:
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            if session is not None:
                await session.abandon()
                log.info("conversation %r: another daemon serves it now; its session here stopped", cut(conversation))
        finally:
            self._stopping.discard(conversation)

    # -- threads -----------------------------------------------------------------------------------
    def holders(self, thread_id: str) -> list[str]:
        """The conversations whose state names ``thread_id`` (one at most, but for a hand-over under way)."""
        return [name for name, session in self.sessions.items() if session.state.thread_id == thread_id]

    def thread_home(self, thread_id: str) -> tuple[str, str | None] | None:
        """The conversation holding ``thread_id`` and the thread's working directory as its state names
        it (``None``: the daemon's workspace); ``None`` when no conversation holds it."""
        for name in self.holders(thread_id):
            return name, self.sessions[name].state.workspace
        return None

    async def hand_thread(self, thread_id: str, conversation: str, cause: str) -> str | None:
        """Give ``thread_id`` to ``conversation`` (a :class:`~coven_codex.agent.services.ThreadHandOver`):
        every other conversation holding it lets it go first, in its own task, and has saved that when
        this returns ``None``; otherwise the reason it could not (the taker must not take the thread)."""
        bound = self._services.settings.kill_grace + RELEASE_SLACK
        loop = asyncio.get_running_loop()
        for holder in self.holders(thread_id):
            if holder == conversation:
                continue
            done: asyncio.Future[None] = loop.create_future()
            self.sessions[holder].offer_release(Release(thread_id, conversation, cause, done))
            try:
                await asyncio.wait_for(asyncio.shield(done), bound)
            except TimeoutError:
                log.warning("conversation %r did not let thread %s go within %gs", cut(holder), thread_id, bound)
                return (
                    f"conversation {cut(holder, 80)!r} holds it and did not let it go within {bound:g} s "
                    "(it may be shutting down or restarting)"
                )
            log.info("Codex thread %s moved from %r to %r", thread_id, cut(holder), cut(conversation))
        return None

    # -- Router ------------------------------------------------------------------------------------
    def route_thought(self, entry: ThoughtEntry, position: Position) -> bool:
        """Offer the thought to its conversation's session (made on first use); ``True`` if it is now pending."""
        return self._session(entry.conversation).offer_thought(entry, position)

    def route_reset(self, entry: ResetEntry | SettingsEntry, position: Position) -> bool:
        """Offer the ``reset`` to its conversation's session (made on first use); ``True`` if it is now pending."""
        return self._session(entry.conversation).offer_reset(entry, position)

    def route_cancel(self, entry: CancelEntry, *, live: bool) -> None:
        """Pass a live cancel to its session; one from before this run, or with no session, is only logged,
        except that one with ``queued`` still drops the thoughts queued before it."""
        session = self.sessions.get(entry.conversation)
        if not live and session is not None and entry.queued:
            session.offer_drop_queued()
            return
        if not live or session is None:
            log.info("cancel %s for %r: no turn of this run to cancel", cut(entry.id or "?"), cut(entry.conversation))
            return
        session.offer_cancel(entry)

    def route_approval(self, entry: ApprovalEntry, *, live: bool) -> None:
        """Pass a live approval answer to its session; one from before this run, or with no session, is only logged."""
        session = self.sessions.get(entry.conversation)
        if not live or session is None:
            log.info(
                "approval %s for %r: the request did not survive a restart",
                cut(entry.id or "?"),
                cut(entry.conversation),
            )
            return
        session.offer_approval(entry)

    # -- shutdown ----------------------------------------------------------------------------------
    async def shutdown(self, *, grace: float, drain: float) -> None:
        """Stop turns and end every Codex tree within ``grace`` seconds, drain egress, save state.

        The polite part (interrupt the turns, let them end, close each Codex) shares one deadline,
        ``grace`` from now. Then whatever still runs is killed: every tree this daemon started,
        and, the daemon being their subreaper, every descendant outside its session (anything a
        driver lost track of), so no Codex process outlives the daemon; what cannot be ended is
        reported once. Every later step is bounded by a constant: the whole takes at most
        ``grace`` + :data:`SHUTDOWN_SLACK` (``docs/operations.md``). Cutting a step short is safe:
        the state is as good as after ``kill -9``, which start-up recovers from.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        sessions = list(self.sessions.values())
        polite = asyncio.ensure_future(self._stop_politely(sessions, deadline))
        await asyncio.wait({polite}, timeout=grace)
        if not polite.done():
            log.warning("Codex did not stop within kill_grace (%gs); killing what is left", grace)
        kill_by = loop.time() + KILL_PHASE
        try:
            left = await asyncio.wait_for(end_all_trees(0.0), KILL_PHASE)
        except TimeoutError:
            left = []
            log.error("ending the Codex processes took longer than %gs; going on", KILL_PHASE)
        if left:
            log.error(
                "%d Codex process(es) could not be ended (still there after SIGKILL, e.g. in "
                "uninterruptible sleep): %s; the next start ends them",
                len(left),
                ", ".join(str(pid) for pid in left[:10]),
            )
        await asyncio.wait({polite}, timeout=max(0.0, kill_by - loop.time()))
        if not polite.done():
            polite.cancel()
            log.warning("closing the sessions did not finish in time; their state is saved as it is")
        with contextlib.suppress(asyncio.CancelledError):
            await polite
        if not polite.cancelled() and polite.exception() is not None:
            log.error("closing the sessions failed", exc_info=polite.exception())
        await asyncio.gather(*(s.drain_egress(drain) for s in sessions))
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        for session in sessions:
            await session.final_save()

    async def _stop_politely(self, sessions: list[Session], deadline: float) -> None:
        """Ask every session to stop (a message to its task: interrupt its running turn, let it end
        until ``deadline``, close its Codex), then close the processes they share."""
        make_driver = self._services.make_driver
        limit = max(0.0, deadline - asyncio.get_running_loop().time())
        await asyncio.gather(*(s.stop(limit) for s in sessions))
        await make_driver.aclose()
