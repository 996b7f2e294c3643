"""The daemon: start-up recovery, the task group that runs everything, clean shutdown.

The caller holds the state directory's lock (:class:`~coven_codex.support.statelock.StateLock`,
one daemon per state directory) and gives the folder of this journal's conversation state
(:mod:`~coven_codex.agent.scope`: a journal the daemon never served has none of another's).
Start-up, in this order (each step relies on the ones before):

1. (the lock, taken by the caller)
2. end Codex process trees a killed predecessor left behind, so no rollout is still growing
   and no two processes write one thread; then start the shared Codex app-server in the
   background (``prestart``, app-server driver), so that its start overlaps the steps below
   instead of delaying the first reply;
3. load every session state and resolve in-flight thoughts against the rollouts;
4. learn which entries the daemon already wrote that it may produce again (egress drops
   replayed entries with those ids): the ids every session state keeps (``own_ids``) and the ids
   of the daemon's entries in the journal from the oldest position that is still needed to its
   end. That is the ingress cursor (ingress re-reads from there and may refuse a thought or
   report a bad line again, with ids derived from their positions) and each conversation's open
   replay window (``replay_from``, :mod:`~coven_codex.agent.replay`): a conversation whose
   window is closed (every conversation that was idle when the daemon stopped, however long
   ago) adds nothing, so start-up reads only what was written since the oldest turn that was
   running or the oldest thought that was pending, never the journal's whole length, and keeps
   in memory only the ids of that window;
5. start the sessions (their egress resumes at once) and the ingress reader.

The saved ingress cursor belongs to one journal file (its fingerprint is saved with it). When
the journal was rotated while the daemon was stopped, the file the cursor belongs to is looked
for beside the journal: found, its rest is finished first (ingress routes its items, then
switches to the new file, see :mod:`~coven_codex.agent.ingress`); not found, the daemon refuses
to start, saying what to do, because it cannot tell which thoughts were answered. Whenever the
reader moves to a new file, every session's positions move with it (:meth:`Daemon._switch_file`),
so positions of two files are never compared.

Shutdown (``stop`` set, e.g. by SIGINT/SIGTERM): stop reading the journal, interrupt running
turns and close every Codex within ``kill_grace`` seconds, then kill whatever is left (every
Codex descendant: the daemon is their subreaper), let egress take the last rollout lines,
cancel the tasks, save every state and the ingress cursor; all within ``kill_grace`` +
:data:`~coven_codex.conversation.manager.SHUTDOWN_SLACK` seconds.
A storage failure (disk full) anywhere shuts down the same way and then raises
:class:`~coven_codex.agent.storage.StorageFailed` with one paragraph saying what to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from coven_codex.agent.egress import AppendHook
from coven_codex.agent.ingress import CURSOR_NAME, Ingress
from coven_codex.agent.processes import ProcessRegistry, end_stale_processes
from coven_codex.agent.services import DriverFactory, RolloutLocator, SessionServices
from coven_codex.agent.slots import SlotPool
from coven_codex.agent.state import SessionState, StateStore
from coven_codex.agent.storage import StorageFailed, failure_message, storage_failure
from coven_codex.agent.writer import DaemonWriter
from coven_codex.codex.process import become_subreaper
from coven_codex.conversation.manager import EGRESS_DRAIN, SHUTDOWN_SLACK, SessionManager
from coven_codex.daemon.cluster_host import DaemonHost
from coven_codex.daemon.startup import Recovery, StartPoint
from coven_codex.daemon.watchdog import ShutdownWatchdog, report_previous_overrun
from coven_codex.entries import BaseEntry
from coven_codex.jobs.runner import JOBS_DIR, JobRunner
from coven_codex.journal import (
    START,
    Journal,
    Position,
)
from coven_codex.metrics.checks import report_egress_lag, report_lag
from coven_codex.metrics.instruments import Instruments
from coven_codex.settings import Settings

if TYPE_CHECKING:
    from coven_codex.cluster.ownership import Ownership

log = logging.getLogger(__name__)

FINAL_STEP_MIN = 0.25
"""Shutdown's last Redis steps (a cluster's hand-over, the cursor save) get what is left of its bound,
and at least this (seconds): a journal that does not answer then costs this, not the bound's margin."""


class Ready(Protocol):
    """Called once the daemon is serving: recovery is done, the sessions and ingress are started."""

    def __call__(self) -> None: ...


class Daemon:
    """The coven-codex daemon over one journal and one state directory; see the module docstring."""

    def __init__(
        self,
        settings: Settings,
        journal: Journal,
        make_driver: DriverFactory,
        *,
        locate_rollout: RolloutLocator,
        codex_home: Path,
        conversations: Path,
        on_append: AppendHook | None = None,
        ownership: Ownership | None = None,
        prestart: Callable[[], None] | None = None,
        instruments: Instruments | None = None,
        codex_pids: Callable[[], int] | None = None,
    ) -> None:
        """``conversations``: the folder of this journal's conversation state (its
        :class:`~coven_codex.agent.scope.Scope`); ``prestart`` starts the Codex the first thought will
        use, without waiting (start-up step 2). ``instruments``: the process's metrics
        (``metrics_port``), with ``codex_pids`` counting the Codex processes running now."""
        self.settings = settings
        self.instruments = instruments
        self.codex_pids = codex_pids
        self.serving = False
        """Recovery is done and the sessions and ingress run (``/readyz``)."""
        self.prestart = prestart
        self.journal = journal
        self.ownership = ownership
        """Several daemons share the journal (docs/distributed.md): only conversations whose lease we hold."""
        if ownership is not None:
            ownership.instruments = instruments
        self.services: SessionServices | None = None
        self.make_driver = make_driver
        self.locate_rollout = locate_rollout
        self.codex_home = codex_home
        self.state_dir = settings.resolved_state_dir
        self.store = StateStore(conversations, durability=settings.durability)
        self.processes = ProcessRegistry(self.state_dir)
        self.on_append = on_append
        self.manager: SessionManager | None = None
        self.ingress: Ingress | None = None
        self.jobs: JobRunner | None = None
        """The job runner (docs/jobs.md), fed by ingress's routing and the writer."""
        self.recovery = Recovery(journal, self.store, codex_home, make_driver, self.cursor_name)
        self._failure: BaseException | None = None
        self._failed = asyncio.Event()

    async def run(self, stop: asyncio.Event, ready: Ready | None = None) -> None:
        """Serve until ``stop`` is set, then shut down cleanly."""
        self.store.prepare()
        report_previous_overrun(self.state_dir)
        # Orphaned Codex descendants are reparented to us, not to init, so the tree kill finds
        # every one of them (coven_codex.codex.process).
        become_subreaper()
        with contextlib.closing(self.store):
            await asyncio.to_thread(end_stale_processes, self.state_dir, self.settings.kill_grace, self.codex_home)
            if self.prestart is not None:
                self.prestart()
            states = self.store.load_all()
            if self.ownership is not None:
                states = await self.ownership.take_back(states)
            for state in states.values():
                await self.recover_in_flight(state, states)
            start = await self.recovery.start_point(states)
            try:
                await self._serve(start, stop, ready)
            except Exception as exc:  # a storage failure while shutting down ends it here
                failure = storage_failure(exc)
                if failure is None:
                    raise
                self.storage_failed(failure)
        if self._failure is not None:
            raise StorageFailed(failure_message(self._failure))

    @property
    def cursor_name(self) -> str:
        """The ingress cursor's name: each daemon of a cluster has its own."""
        return self.ownership.cursor_name if self.ownership is not None else CURSOR_NAME

    async def _switch_file(self) -> None:
        """Ingress moves to a new journal file: move every session's positions there too.

        Called once every thought read from the old file is finished and before anything of the
        new one is read: delivered ids of the old file are never read again (forgotten), and an
        open replay window now starts at the new file's start.
        """
        assert self.manager is not None
        for session in list(self.manager.sessions.values()):
            session.state.delivered.clear()
            if session.state.replay_from is not None:
                session.state.replay_from = START
            await session.save_state()
        log.info("ingress moved to the new journal file; %d conversation(s) follow", len(self.manager.sessions))

    async def _serve(self, start: StartPoint, stop: asyncio.Event, ready: Ready | None) -> None:
        """Step 5 and the shutdown: run the sessions and the ingress until ``stop`` (or a storage failure)."""
        watchdog = ShutdownWatchdog(self.state_dir, self.settings.kill_grace + SHUTDOWN_SLACK)
        try:
            async with asyncio.TaskGroup() as group:
                manager, ingress, jobs = self._start_serving(group, start)
                ingress_task = group.create_task(self._run_ingress(ingress), name="ingress")
                jobs_task = group.create_task(jobs.run(), name="jobs")
                cluster_task = (
                    self.ownership.serve(DaemonHost(self, start.cursor), group) if self.ownership is not None else None
                )
                log.info(
                    "daemon running: %d conversation(s) restored, journal read from %s", len(start.states), start.cursor
                )
                self.serving = True
                if self.instruments is not None:
                    self.instruments.refreshers.append(self._refresh_metrics)
                if ready is not None:
                    ready()
                stop_task = group.create_task(stop.wait(), name="stop")
                failed_task = group.create_task(self._failed.wait(), name="storage-failed")
                await asyncio.wait([ingress_task, stop_task, failed_task], return_when=asyncio.FIRST_COMPLETED)
                await self._shut_down(manager, ingress, ingress_task, cluster_task, watchdog)
                jobs_task.cancel()
                stop_task.cancel()
                failed_task.cancel()
        finally:
            watchdog.disarm()
        log.info("daemon stopped cleanly")

    def _start_serving(self, group: asyncio.TaskGroup, start: StartPoint) -> tuple[SessionManager, Ingress, JobRunner]:
        """The sessions' services, the manager with every state restored, the ingress and the job runner
        (not started)."""
        ingress_box: list[Ingress] = []

        def finish_thought(position: Position) -> None:
            ingress_box[0].finish(position)

        def saved_cursor() -> Position:
            return ingress_box[0].saved_position if ingress_box else start.cursor

        writer = DaemonWriter(
            self.ownership.fenced(self.journal) if self.ownership else self.journal,
            start.known_ids,
            on_written=self._on_written,
        )
        jobs = self.jobs = JobRunner(
            self.journal, self.store.root / JOBS_DIR, roots=self.settings.cwd_roots, write=writer.append
        )
        jobs.load()
        services = SessionServices(
            settings=self.settings,
            journal=self.journal,
            store=self.store,
            slots=SlotPool(self.settings.max_sessions),
            job_slots=SlotPool(self.settings.max_jobs),
            processes=self.processes,
            make_driver=self.make_driver,
            locate_rollout=self.locate_rollout,
            finish_thought=finish_thought,
            saved_cursor=saved_cursor,
            writer=writer,
            on_append=self.on_append,
            on_storage_failure=self.storage_failed,
            cluster=self.ownership,
            on_lease_lost=self.ownership.dropper(group) if self.ownership else None,
            instruments=self.instruments,
            codex_home=self.codex_home,
        )
        self.services = services
        manager = self.manager = SessionManager(services, group)
        services.hand_thread = manager.hand_thread
        for state in start.states.values():
            manager.restore(state)
        ingress = self.ingress = Ingress(
            self.journal,
            jobs.routing(manager),
            start=start.cursor,
            live_from=start.live_from,
            known_ids=start.known_ids,
            previous=start.previous,
            on_switch=self._switch_file,
            cursor_name=self.cursor_name,
            gate=self.ownership,
            backlog=start.backlog,
        )
        ingress_box.append(ingress)
        return manager, ingress, jobs

    def _on_written(self, entry: BaseEntry) -> None:
        """Every entry the daemon's writer appended: the metrics and the job runner are told."""
        if self.instruments is not None:
            self.instruments.entry_appended(entry)
        if self.jobs is not None:
            self.jobs.observe(entry)

    async def _shut_down(
        self,
        manager: SessionManager,
        ingress: Ingress,
        ingress_task: asyncio.Task[None],
        cluster_task: asyncio.Task[None] | None,
        watchdog: ShutdownWatchdog,
    ) -> None:
        """No new thoughts; stop the turns and Codex, hand a cluster's conversations over, save the cursor."""
        log.info("shutting down: no new thoughts; stopping turns and Codex processes")
        self.serving = False
        loop = asyncio.get_running_loop()
        shutdown_by = loop.time() + self.settings.kill_grace + SHUTDOWN_SLACK
        if self.ownership is not None:
            self.ownership.closing()
        watchdog.arm()  # (the bound made hard from outside the event loop: daemon/watchdog.py)
        ingress_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ingress_task
        await manager.shutdown(grace=self.settings.kill_grace, drain=EGRESS_DRAIN)
        if self.ownership is not None:
            await self.ownership.final_mirror(
                ((s.state, s.pending_positions) for s in manager.sessions.values()),
                within=max(FINAL_STEP_MIN, shutdown_by - loop.time() - FINAL_STEP_MIN),
            )
        if cluster_task is not None:
            cluster_task.cancel()
        await self._last_cursor_save(ingress, max(FINAL_STEP_MIN, shutdown_by - loop.time()))

    async def _last_cursor_save(self, ingress: Ingress, within: float) -> None:
        """Shutdown: save the ingress cursor once more, within ``within`` seconds (a Redis journal
        that does not answer cannot hold up the exit; the cursor saved before stands)."""
        try:
            async with asyncio.timeout(within):
                await ingress.save()
        except TimeoutError:
            log.warning(
                "shutting down: the journal did not answer within %.1fs, so the ingress cursor was not saved"
                " once more; the next start reads from the one saved before (nothing is answered twice)",
                within,
            )

    async def _refresh_metrics(self) -> None:
        """Bring the daemon's scrape-time gauges up to date (:mod:`coven_codex.metrics.instruments`)."""
        metrics, manager, services, ingress = self.instruments, self.manager, self.services, self.ingress
        if metrics is None or manager is None or services is None or ingress is None:
            return
        sessions = list(manager.sessions.values())
        metrics.conversations_live.set(len(sessions))
        metrics.threads_loaded.set(sum(1 for session in sessions if session.live))
        metrics.turns_running.set(sum(1 for session in sessions if session.turn_running))
        pools = {id(pool): pool for pool in (services.slots, services.job_slots) if pool is not None}
        metrics.conversations_waiting.set(sum(pool.waiting for pool in pools.values()))
        if self.codex_pids is not None:
            metrics.codex_processes.set(self.codex_pids())
        if self.ownership is not None:
            metrics.leases_held.set(len(sessions))
        await report_lag(self.journal, metrics, "ingress", ingress.cursor.position)
        await report_egress_lag(
            metrics,
            [
                (Path(session.state.rollout_path), session.state.egress_offset)
                for session in sessions
                if session.state.rollout_path is not None
            ],
        )

    async def _run_ingress(self, ingress: Ingress) -> None:
        try:
            await ingress.run()
        except Exception as exc:
            failure = storage_failure(exc)
            if failure is None:
                raise
            self.storage_failed(failure)

    def fail(self, failure: BaseException) -> None:
        """Stop the daemon in order because of ``failure`` (a :class:`StorageError`-like one that says what to do)."""
        self.storage_failed(failure)

    def storage_failed(self, failure: BaseException) -> None:
        """The first storage failure stops the daemon (see :mod:`coven_codex.agent.storage`)."""
        if self._failure is None:
            self._failure = failure
            log.error("storage failed, stopping: %s", failure)
            self._failed.set()

    async def recover_in_flight(self, state: SessionState, states: dict[str, SessionState]) -> None:
        """Resolve ``state``'s in-flight thought as start-up does (:meth:`Recovery.recover_in_flight`)."""
        await self.recovery.recover_in_flight(state, states)
