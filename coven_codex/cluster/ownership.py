"""The daemon's side of the cluster: which journal items it takes, adopting and dropping conversations.

A daemon takes a conversation's items only while it holds the conversation's lease
(:class:`~coven_codex.cluster.node.ClusterNode`), and only from the conversation's *floor* on
(every thought before it is finished; :mod:`~coven_codex.cluster.mirror`). A thought of a
conversation nobody holds is taken by the live daemon it goes to by rendezvous hashing, which
claims the lease; the others pass it over and note it, so that if the chosen daemon does not
claim it within a lease time, the next one does.

*Adopting* a conversation (claimed at a thought, swept up after its owner died or stopped, or
taken back at start-up): its state comes from the mirror unless this daemon wrote the mirror
last (then its own files are as new or newer), the rollout copy is written into this daemon's
``CODEX_HOME``, an in-flight thought is resolved against that rollout exactly as after a
restart, the ids of entries already in the journal are learnt, the session starts, and the
journal is re-read from the floor for the conversation's thoughts the previous owner had not
finished. Adoptions run as tasks of their own; meanwhile the live reader holds the conversation's
items for the adoption, which routes them after the re-read, so thoughts keep their journal order
and no other conversation waits.

*Dropping* one (its lease was lost: this daemon stalled past it, or Redis expired it): the
session stops without writing anything (its writes would be refused anyway), its Codex thread
is let go, and its pending journal positions are released; the new owner answers them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol, cast

from redis.exceptions import RedisError

from coven_codex.agent.egress import complete_length
from coven_codex.agent.state import SessionState, StateStore
from coven_codex.agent.storage import storage_failure
from coven_codex.cluster.fenced import FenceableJournal, FencedJournal
from coven_codex.cluster.leases import LeaseLost
from coven_codex.cluster.mirror import MirroredRollout, rehydrate, relative_rollout_path
from coven_codex.cluster.node import ClusterNode
from coven_codex.entries import CODEX_SENDER, ResetEntry, ThoughtEntry
from coven_codex.journal import Journal, JournalError, JournalItem, JournalRecord, Position
from coven_codex.metrics.instruments import Instruments
from coven_codex.rollout.locator import find_rollout
from coven_codex.support.limits import cut

log = logging.getLogger(__name__)

REPORT_GRACE = 20.0
"""How long past a lease time a new owner waits for a previous owner's record of an in-flight
thought: the previous owner reports when it restarts or wakes, which comes after its lease ran out
and a start-up (seen taking 17 s from the kill to the report on two cores at load 35, with the
restart itself 5 s after the kill)."""
REPORT_WAIT_MAX = 45.0
"""Seconds, at most."""
ADOPT_BATCH = 64
"""Orphaned conversations adopted per sweep round, at most (the rest in the next rounds)."""


class SessionHost(Protocol):
    """What adopting and dropping need of the running daemon."""

    async def recover(self, state: SessionState) -> None:
        """Resolve ``state``'s in-flight thought against its rollout, as after a restart."""
        ...

    async def end_lost_turn(self, state: SessionState) -> None:
        """End a turn the previous owner started and never ended (:mod:`coven_codex.cluster.turns`)."""
        ...

    async def received(self, state: SessionState) -> bool:
        """Whether ``state``'s rollout shows that Codex received its in-flight thought."""
        ...

    def start_session(self, state: SessionState) -> None:
        """Start the conversation's session."""
        ...

    async def stop_session(self, conversation: str) -> None:
        """Stop the conversation's session without writing, releasing its pending positions."""
        ...

    def serving(self, conversation: str) -> bool:
        """Whether a session of ``conversation`` runs here or is still being stopped."""
        ...

    async def replay(self, items: list[JournalItem]) -> None:
        """Route these items (of one conversation, from its floor) as read before this run."""
        ...

    def read_position(self) -> Position:
        """Where the journal reader is: every item before it was routed."""
        ...

    def storage_failed(self, failure: BaseException) -> None:
        """The journal (Redis) failed for good: stop the daemon in order, saying so once."""
        ...

    async def unload_thread(self, thread_id: str) -> None:
        """End the Codex process that has ``thread_id`` loaded, if one runs (its rollout was replaced)."""
        ...

    @property
    def store(self) -> StateStore:
        """The daemon's state store."""
        ...


def _position_text(position: Position) -> str:
    return str(position)


def _parse_position(text: str) -> Position:
    return Position.parse(text)


def _read_or_empty(path: str | None) -> bytes:
    if path is None:
        return b""
    try:
        return Path(path).read_bytes()
    except OSError:
        return b""


class Ownership:
    """Gates the journal reader and runs adoption and dropping (module docstring)."""

    def __init__(self, node: ClusterNode, journal: Journal, codex_home: Path) -> None:
        self.node = node
        self.journal = journal
        self.codex_home = codex_home
        self.host: SessionHost | None = None
        self._floors: dict[str, Position | None] = {}
        self._adopting: dict[str, asyncio.Event] = {}
        self._held: dict[str, list[JournalRecord]] = {}
        """Items the reader passed to a conversation being adopted, in journal order."""
        self._closing = False
        self._taken: list[str] = []
        """Conversations claimed back at start-up, adopted once the daemon serves."""
        self._group: asyncio.TaskGroup | None = None
        self._adoptions: set[asyncio.Task[bool]] = set()
        self._drops: set[asyncio.Task[None]] = set()
        """Conversations being let go (their sessions stopped, our rollouts reported) in tasks of their own."""
        self.instruments: Instruments | None = None
        """The daemon's metrics (``coven_leases_moved_total``), when it has a metrics port."""

    @property
    def cursor_name(self) -> str:
        """This daemon's own ingress cursor (each daemon reads the whole journal at its own pace)."""
        return f"agent-ingress@{self.node.daemon_id}"

    # -- start-up --------------------------------------------------------------------------------
    async def take_back(self, states: dict[str, SessionState]) -> dict[str, SessionState]:
        """Start-up: claim the conversations of our saved states that no other daemon wrote since
        (their state and rollout here are the newest). None is restored directly: each is adopted
        like any other once the daemon serves (:meth:`start`), which also re-reads the journal from
        its floor (our own cursor may already be past thoughts of it we had not finished). Returns
        the states to restore at once: none."""
        await self.node.join()
        for conversation, local in states.items():
            record = await self.node.mirror.load_state(conversation)
            if record is not None and record.writer != self.node.daemon_id:
                continue
            claimed = await self.node.claim(conversation)
            if not claimed.ok:
                log.info("conversation %r is served by daemon %s now", cut(conversation), cut(claimed.holder))
                await self.report_lost(conversation, local)
                continue
            self._taken.append(conversation)
        return {}

    async def _copy_whole_rollout(self, state: SessionState, token: int) -> None:
        """Make the rollout copy hold every complete line of ``state``'s rollout file before the state
        is mirrored: whatever the state relies on (its thread, a thought delivered because the rollout
        showed it, even when egress has not reached that line yet) is then in the copy."""
        if state.thread_id is None:
            return
        rollout = Path(state.rollout_path) if state.rollout_path is not None else None
        if rollout is None:
            # The thread's first turn: Codex made the file, egress has not located it yet (or there is none).
            rollout = await asyncio.to_thread(find_rollout, self.codex_home, state.thread_id)
            if rollout is None:
                return
        end = await asyncio.to_thread(complete_length, rollout)
        if end == 0:
            return
        await self.node.mirror.copy_rollout(
            state.conversation, token, thread_id=state.thread_id, codex_home=self.codex_home, rollout=rollout, end=end
        )

    # -- the journal reader's gate ------------------------------------------------------------------
    async def admit(self, record: JournalRecord) -> bool:
        """Whether this daemon routes ``record`` now (module docstring). An item of a conversation
        being adopted is held for the adoption, which routes it in journal order once it has caught
        up; a thought of a conversation nobody holds that goes to us claims it and starts its
        adoption. The reader never waits for an adoption."""
        entry, position = record.entry, record.start
        conversation = entry.conversation
        while True:
            if conversation in self._adopting:
                self._held.setdefault(conversation, []).append(record)
                return False
            if self.node.owns(conversation):
                floor = self._floors.get(conversation)
                return floor is None or position >= floor
            if entry.sender == CODEX_SENDER or not isinstance(entry, ThoughtEntry | ResetEntry):
                return False  # cancels and approvals go to the owner only; nobody claims for them
            holder = await self.node.leases.holder(conversation)
            if conversation in self._adopting or self.node.owns(conversation):
                continue  # (the sweep took it meanwhile)
            if holder is not None and holder != self.node.daemon_id:
                return False
            if not self.node.preferred(conversation) or self._letting_go(conversation):
                await self.node.leases.note_unclaimed(conversation, _position_text(position))
                return False
            claimed = await self.node.claim(conversation, _position_text(position))
            if claimed.ok and conversation not in self._adopting and not self._closing:
                self._start_adoption(conversation, position)
            elif not claimed.ok and conversation not in self._adopting:
                return False

    def _letting_go(self, conversation: str) -> bool:
        """Whether our session of a conversation whose lease we lost is still here (being stopped). We
        claim it again only once it is gone: a claim gives a new token, and that session (the old
        lease's, with its own queued thoughts) would write and hand thoughts to Codex under it, beside
        the new session; the sweep adopts the conversation in a later round (the floor is in Redis)."""
        return self.host is not None and self.host.serving(conversation)

    def _start_adoption(self, conversation: str, at: Position | None) -> None:
        """Adopt a conversation we just claimed, as a task of its own (it may wait up to a lease time
        or more; neither the reader nor the renewals may). The reader holds its items from now on."""
        assert self._group is not None
        log.info("cluster: adopting conversation %r", cut(conversation))
        done = asyncio.Event()
        self._adopting[conversation] = done
        task = self._group.create_task(
            self._adopt_or_give_up(conversation, at, done), name=f"adopt:{conversation[:60]}"
        )
        self._adoptions.add(task)
        task.add_done_callback(self._adoptions.discard)

    # -- adopting ------------------------------------------------------------------------------------
    async def adopt_orphans(self, conversations: list[str]) -> None:
        """The sweep found conversations nobody holds that go to us: claim and adopt them."""
        for conversation in conversations[:ADOPT_BATCH]:
            if self._closing:
                return
            if self.node.owns(conversation) or conversation in self._adopting or self._letting_go(conversation):
                continue
            claimed = await self.node.claim(conversation)
            if claimed.ok and conversation not in self._adopting and self._group is not None:
                self._start_adoption(conversation, None)

    async def _adopt_or_give_up(self, conversation: str, at: Position | None, done: asyncio.Event) -> bool:
        """:meth:`_adopt`; when it fails (Redis, the journal, the lease lost meanwhile) the conversation
        is let go here, said once in the log: its lease runs out and it is adopted again."""
        try:
            await self._adopt(conversation, at, done)
        except (LeaseLost, JournalError, RedisError, OSError) as exc:
            log.warning("cluster: adopting conversation %r failed (%s); letting it go", cut(conversation), exc)
            self.node.drop(conversation)
            await self.lost([conversation])
            return False
        return True

    async def _adopt(self, conversation: str, at: Position | None, done: asyncio.Event) -> None:
        """Hydrate, start and catch up a conversation we just claimed (``at``: the thought that made us)."""
        host = self.host
        assert host is not None
        try:
            local = host.store.load(conversation)
            state, previous = await self._hydrate(conversation, local, host.store)
            adopted_from_mirror = state is not local
            if previous is not None and state.in_flight is not None and not await host.received(state):
                await self._await_report(conversation, previous, state)
            floor = self._floors.get(conversation)
            if floor is None and at is not None:
                self._floors[conversation] = floor = at
            await host.recover(state)
            await self._mirror(conversation, state, ())  # (the rollout copy first: save_state)
            if adopted_from_mirror:
                await host.end_lost_turn(state)
            if self._closing:
                return  # shutting down (no await since the check): the lease is handed over with the others
            if not self.node.owns(conversation):
                raise LeaseLost(conversation)  # lost again meanwhile: no session for a lease we do not hold
            host.start_session(state)
            if previous is not None and self.instruments is not None:
                self.instruments.lease_moved("in")  # (another daemon served it last)
            if floor is not None:
                items = await self.journal.read(floor, await self.journal.end_position())
                if self._closing:
                    return  # (its session is stopped with the others; the next owner re-reads from the floor)
                await host.replay(
                    [i for i in items if isinstance(i, JournalRecord) and i.entry.conversation == conversation]
                )
            # What the reader held meanwhile, in order (items also in the range above are known by id);
            # the last check and the end of the adoption have no await between them.
            while held := self._held.get(conversation):
                record = held.pop(0)
                if floor is None or record.start >= floor:
                    await host.replay([record])
        finally:
            self._held.pop(conversation, None)
            if self._adopting.get(conversation) is done:
                del self._adopting[conversation]
            done.set()

    async def _await_report(self, conversation: str, previous: str, state: SessionState) -> None:
        """A thought was in flight and our copy does not show Codex got it: the previous owner's own
        rollout may (it died or stalled before egress copied the line). If it reported already (to an
        earlier claimant, which lost the lease before it finished adopting) or reports within a lease
        time, and its rollout extends the copy, that longer record is the one we continue from."""
        if state.thread_id is None:
            return
        kept = await self.node.mirror.kept_report(conversation, previous)
        if kept is not None and await self._continue_from(conversation, previous, state, kept):
            return
        wait = min(self.node.lease_time + REPORT_GRACE, REPORT_WAIT_MAX)
        log.info(
            "conversation %r: a thought was in flight; waiting up to %.0fs for daemon %s's own record of it",
            cut(conversation),
            wait,
            cut(previous),
        )
        report = await self.node.mirror.await_report(conversation, self.node.token(conversation), previous, wait)
        if report is None:
            log.info("conversation %r: no record came; resolving against the copy", cut(conversation))
            return
        await self._continue_from(conversation, previous, state, report)

    async def _continue_from(
        self, conversation: str, previous: str, state: SessionState, report: MirroredRollout
    ) -> bool:
        """Continue from ``previous``'s reported rollout when it extends our copy (same thread); whether it did."""
        assert state.thread_id is not None
        copy = await asyncio.to_thread(_read_or_empty, state.rollout_path)
        if not (len(report.data) > len(copy) and report.data.startswith(copy) and state.thread_id in report.path):
            return False
        longer = MirroredRollout(state.thread_id, report.path, report.data)
        state.rollout_path = str(await self._rehydrate(longer))
        log.info("conversation %r: continuing from daemon %s's longer record", cut(conversation), cut(previous))
        return True

    async def report_lost(self, conversation: str, local: SessionState) -> None:
        """We lost ``conversation``: report our own rollout to the new owner. Also when our own state
        has no thought in flight: we may have resolved one since the mirror was last written (a restart
        that died again before mirroring it), and the new owner waits for this only when the mirror
        shows one in flight."""
        rollout: Path | None = Path(local.rollout_path) if local.rollout_path else None
        if rollout is None and local.thread_id is not None:
            # The thread's first turn: Codex made the file, our state did not record it yet.
            rollout = await asyncio.to_thread(find_rollout, self.codex_home, local.thread_id)
        if rollout is None:
            return
        try:
            data = await asyncio.to_thread(rollout.read_bytes)
        except OSError:
            return
        try:
            await self.node.mirror.report(conversation, relative_rollout_path(self.codex_home, rollout), data)
        except (RedisError, JournalError, OSError) as exc:
            log.warning(
                "cluster: could not report our record of conversation %r to its new owner (%s); it will"
                " resolve its in-flight thought against its copy",
                cut(conversation),
                str(exc)[:200],
            )

    async def _hydrate(
        self, conversation: str, local: SessionState, store: StateStore
    ) -> tuple[SessionState, str | None]:
        """The state to continue from: ours when we wrote the mirror last, else the mirror's (with the
        daemon that wrote it)."""
        mirror = self.node.mirror
        floor_text = await mirror.load_floor(conversation)
        self._floors[conversation] = None if floor_text is None else _parse_position(floor_text)
        record = await mirror.load_state(conversation)
        if record is None or (record.writer == self.node.daemon_id and store.path_for(conversation).exists()):
            return local, None
        state = SessionState.model_validate_json(record.state)
        rollout = await mirror.load_rollout(conversation)
        if rollout is not None and rollout.thread_id == state.thread_id:
            state.rollout_path = str(await self._rehydrate(rollout))
        else:
            state.rollout_path = None
        await asyncio.to_thread(store.save, state)
        log.info(
            "conversation %r: continuing from the state daemon %s mirrored (thread %s)",
            cut(conversation),
            cut(record.writer),
            state.thread_id,
        )
        return state, record.writer if record.writer != self.node.daemon_id else None

    async def _rehydrate(self, rollout: MirroredRollout) -> Path:
        """Write ``rollout`` into our ``CODEX_HOME`` (:func:`rehydrate`). When that replaced our own older
        file (another daemon continued the thread meanwhile), a Codex process of ours that still has
        the thread loaded (Codex cannot unload one) would resume it from its old history and append to
        the old file: that process is ended first, so the thread is resumed from the new file."""
        done = await asyncio.to_thread(rehydrate, self.codex_home, rollout)
        if done.replaced and rollout.thread_id:
            assert self.host is not None
            await self.host.unload_thread(rollout.thread_id)
        return done.path

    # -- the sessions' mirror hooks -------------------------------------------------------------------
    async def save_state(self, conversation: str, data: bytes, pending: Iterable[Position]) -> None:
        """Mirror a state the session just saved, with the conversation's floor (fenced); the rollout
        copy first gets every complete line of the state's rollout (:meth:`_copy_whole_rollout`).

        The session hands a thought to Codex once this returns (the write-ahead), so the lease must
        still be fresh when it does, not only when it began: Redis may have done the fenced write
        in time and its answer come much later (Redis stopped with ``SIGSTOP`` right after the
        write, the network held up), by which time the lease may have run out and another daemon
        taken the thought. So the lease is confirmed again at the end (renewed when the writes took
        more than half a lease time); :class:`LeaseLost` then, and the thought is not handed over."""
        token = await self.node.fresh(conversation)
        await self._copy_whole_rollout(SessionState.model_validate_json(data), token)
        await self.node.mirror.save_state(
            conversation, token, data.decode("utf-8"), _position_text(self._floor(conversation, pending))
        )
        await self.node.fresh(conversation)

    async def _mirror(self, conversation: str, state: SessionState, pending: Iterable[Position]) -> None:
        await self.save_state(conversation, state.model_dump_json().encode("utf-8"), pending)

    def _floor(self, conversation: str, pending: Iterable[Position]) -> Position:
        """Before which every thought of the conversation is finished: its oldest pending one, else
        where the reader is; while adopting, no later than the floor it was adopted with. It never
        moves back (delivered ids before it may be forgotten)."""
        assert self.host is not None
        candidates = list(pending)
        stored = self._floors.get(conversation)
        if conversation in self._adopting:
            if stored is not None:
                candidates.append(stored)
            return min(candidates) if candidates else self.host.read_position()
        if candidates:
            return min(candidates)
        floor = self.host.read_position()
        if stored is not None and stored > floor:
            return stored
        self._floors[conversation] = floor
        return floor

    async def copy_rollout(self, conversation: str, thread_id: str, rollout: Path, end: int) -> None:
        """Egress is about to translate the rollout up to ``end``: the copy gets those bytes first (fenced)."""
        await self.node.mirror.copy_rollout(
            conversation,
            self.node.token(conversation),
            thread_id=thread_id,
            codex_home=self.codex_home,
            rollout=rollout,
            end=end,
        )

    # -- running ------------------------------------------------------------------------------------
    def serve(self, host: SessionHost, group: asyncio.TaskGroup) -> asyncio.Task[None]:
        """Serve in ``host``: renewals, sweeps and adoption as a task of ``group`` (adoptions and drops too)."""
        self.host = host
        self._group = group
        for conversation in self._taken:
            self._start_adoption(conversation, None)
        self._taken.clear()
        return group.create_task(self._run_node(), name="cluster")

    async def _run_node(self) -> None:
        """The node's rounds; Redis gone for longer than the journal's outage limit stops the daemon the
        way a journal failure does (in order, with one message), not with a crash."""
        assert self.host is not None
        try:
            await self.node.run(self.lost_in_background, self.adopt_orphans)
        except Exception as exc:
            failure = storage_failure(exc)
            if failure is None:
                raise
            self.host.storage_failed(failure)

    def fenced(self, journal: Journal) -> Journal:
        """``journal`` for the daemon's entries: appends fenced by their conversation's lease."""
        return FencedJournal(cast(FenceableJournal, journal), self.node)

    def dropper(self, group: asyncio.TaskGroup) -> Callable[[str], None]:
        """What a session whose write was refused (its lease is gone) calls: drop the conversation here."""

        def refused(conversation: str) -> None:
            self.node.drop(conversation)
            self._track(group.create_task(self.lost([conversation]), name=f"drop:{conversation[:60]}"))

        return refused

    # -- dropping and leaving -----------------------------------------------------------------------
    async def lost_in_background(self, conversations: list[str]) -> None:
        """The renewal round found leases lost: drop those conversations in a task of their own
        (ending their Codex threads takes time the renewals of the others do not have)."""
        if self._group is None:
            await self.lost(conversations)
            return
        self._track(self._group.create_task(self.lost(conversations), name="drop-lost-conversations"))

    def _track(self, task: asyncio.Task[None]) -> None:
        """Keep a drop task until it ends: shutdown waits for it within its bound, then cancels it."""
        self._drops.add(task)
        task.add_done_callback(self._drops.discard)

    async def lost(self, conversations: list[str]) -> None:
        """Leases lost: stop those sessions (the new owners continue them)."""
        assert self.host is not None
        for conversation in conversations:
            if self.node.owns(conversation):
                continue  # claimed again since: its old session was gone by then (see _letting_go)
            self._floors.pop(conversation, None)
            if self.instruments is not None and self.host.serving(conversation):
                self.instruments.lease_moved("out")
            await self.host.stop_session(conversation)
            await self.report_lost(conversation, self.host.store.load(conversation))

    def closing(self) -> None:
        """Shutdown began: adopt nothing more, stop the adoptions under way (the leases held are
        handed over at the end; a new owner hydrates them from the mirror)."""
        self._closing = True
        for task in self._adoptions:
            task.cancel()

    async def final_mirror(self, sessions: Iterable[tuple[SessionState, Iterable[Position]]], *, within: float) -> None:
        """Shutdown, after the last local saves: mirror each state (with its pending thoughts) once
        more, then give every lease back: the other daemons take the conversations over at once.

        All of it within ``within`` seconds (part of the shutdown's bound): when Redis cannot be
        reached or does not answer in time, that is said once and the leases are left to run out
        (the others then take the conversations over from what was mirrored before, a lease time
        later)."""
        held = [(state, list(pending)) for state, pending in sessions if self.node.owns(state.conversation)]
        failures: list[str] = []

        async def last_mirror(state: SessionState, pending: list[Position]) -> None:
            try:
                await self._mirror(state.conversation, state, pending)
            except LeaseLost:
                return
            except (RedisError, JournalError, OSError) as exc:  # (its earlier mirror stands: a kill -9's case)
                failures.append(f"{type(exc).__name__}: {str(exc)[:200]}")

        try:
            async with asyncio.timeout(within):
                if self._drops:  # (reports to new owners under way: they wait through an outage)
                    await asyncio.wait(set(self._drops))
                await asyncio.gather(*(last_mirror(state, pending) for state, pending in held))
                await self.node.leave()
        except TimeoutError:
            failures.append(f"Redis did not answer within {within:.1f}s")
        except (RedisError, JournalError, OSError) as exc:
            failures.append(f"{type(exc).__name__}: {str(exc)[:200]}")
        finally:
            for task in self._drops:  # (the daemon's task group would wait for them)
                task.cancel()
        if not failures:
            return
        if not self.node.held:  # handed over; only a last mirror failed
            log.warning(
                "cluster: handed the conversations over, but %d last state(s) could not be mirrored (%s); their"
                " new owners continue from the states mirrored before",
                len(failures),
                failures[0],
            )
            return
        log.warning(
            "cluster: could not hand %d conversation(s) over at shutdown (%s); the other daemons take them"
            " once the leases run out (%gs)",
            len(self.node.held),
            failures[0],
            self.node.lease_time,
        )
