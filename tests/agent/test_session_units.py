"""Unit tests of :class:`Session` (and its supervision) against a fake CODEX driver.

The driver is an in-process :class:`~coven_codex.codex.drivers.base.CodexDriver` that writes a
real rollout file (so the session's real egress tails it with the real tailer) and emits the
driver events the way the app-server driver does, through the base class's dispatcher. The
journal is a ``MemoryJournal``; the state store is a real ``StateStore`` in a temporary
directory. Nothing of the session is mocked.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest

from coven_codex.agent.processes import ProcessRegistry
from coven_codex.agent.services import SessionServices
from coven_codex.agent.slots import SlotPool
from coven_codex.agent.state import SessionState, StateStore
from coven_codex.agent.writer import DaemonWriter
from coven_codex.codex.capabilities import DriverPlan
from coven_codex.codex.drivers import (
    ApprovalRequested,
    CodexDriver,
    DriverError,
    DriverFailed,
    DriverSettings,
    EventSink,
    ImageInput,
    Submission,
    ThreadOptions,
    ThreadStarted,
    TurnFinished,
    TurnStarted,
)
from coven_codex.codex.drivers.events import TurnStatus
from coven_codex.codex.errors import ClassifiedError, classify, process_error
from coven_codex.codex.thought import Thought
from coven_codex.codex.version import CodexVersion
from coven_codex.conversation.handover import DELIVERY_ATTEMPTS
from coven_codex.conversation.manager import SessionManager
from coven_codex.conversation.session import Session
from coven_codex.entries import ApprovalEntry, BaseEntry, ErrorEntry, StatusEntry, ThoughtEntry
from coven_codex.journal import JournalRecord, MemoryJournal
from coven_codex.rollout import TURN_END_STATES
from coven_codex.settings import Settings
from coven_codex.support.backoff import MAX_BACKOFF, RepeatFilter, backoff

pytestmark = pytest.mark.timeout(60)

AUTH_ERROR = "unexpected status 401 Unauthorized: Incorrect API key provided"


def _line(payload: dict[str, Any], kind: str = "event_msg") -> bytes:
    record = {"timestamp": "2026-11-23T10:00:00.000Z", "type": kind, "payload": payload}
    return json.dumps(record).encode() + b"\n"


@dataclass
class FakeCodex:
    """What every fake driver of a test shares: the rollout files and a log of hand-overs."""

    root: Path
    sends: list[tuple[str, str]] = field(default_factory=list)
    """(thought id, text) of every hand-over, in order (sends and steers)."""
    drivers: list[FakeDriver] = field(default_factory=list)
    open_error: BaseException | None = None
    plan: DriverPlan = field(
        default_factory=lambda: DriverPlan(
            "app-server", "fake", records_client_id=True, records_turn_end=True, takes_images=True, forks_threads=True
        )
    )
    """What the fake drivers can do (a test may replace it)."""
    images: list[tuple[str, tuple[ImageInput, ...]]] = field(default_factory=list)
    """(thought id, images) of every hand-over that carried images."""

    def rollout(self, thread_id: str) -> Path:
        return self.root / f"rollout-{thread_id}.jsonl"

    options: list[ThreadOptions] = field(default_factory=list)
    """The thread options of every driver made, in order."""

    def __call__(self, conversation: str, options: ThreadOptions, sink: EventSink) -> CodexDriver:
        self.options.append(options)
        driver = FakeDriver(self, sink)
        self.drivers.append(driver)
        return driver

    async def aclose(self) -> None:
        """No process is shared by the fake drivers."""

    async def locate(self, thread_id: str) -> Path:
        path = self.rollout(thread_id)
        if not path.exists():
            raise LookupError(f"no rollout for {thread_id}")
        return path


class FakeDriver(CodexDriver):
    """A Codex that answers by the thought's first word (see :meth:`_start_turn`).

    A real :class:`CodexDriver` as far as the session can tell: its events reach the session's
    sink through the driver's own dispatcher task, and a dead driver refuses calls as every
    driver does; only the Codex behind it is played.
    """

    kind: ClassVar[str] = "fake"
    persistent: ClassVar[bool] = True
    label: ClassVar[str] = "the fake Codex"
    supports_steer = True

    def __init__(self, codex: FakeCodex, sink: EventSink) -> None:
        super().__init__(
            Path("codex"), CodexVersion(0, 169, 0), codex.root, env={}, settings=DriverSettings(), sink=sink
        )
        self._codex = codex
        self._turn: str | None = None
        self.closed = False

    @property
    def busy(self) -> bool:
        return self._turn is not None

    @property
    def pids(self) -> list[int]:
        return []

    async def start(self, resume_thread_id: str | None) -> None:
        if self._codex.open_error is not None:
            raise self._codex.open_error
        await self._start_runner()
        self._thread_id = resume_thread_id or str(uuid.uuid4())
        self._codex.rollout(self._thread_id).touch()
        await self._events.deliver(ThreadStarted(self._thread_id, resumed=resume_thread_id is not None))

    def _write(self, *lines: bytes) -> None:
        assert self._thread_id is not None
        with self._codex.rollout(self._thread_id).open("ab") as handle:
            handle.write(b"".join(lines))

    def _recorded(self, thought_id: str, text: str) -> bytes:
        item = {
            "type": "UserMessage",
            "id": uuid.uuid4().hex,
            "client_id": thought_id,
            "content": [{"type": "text", "text": text}],
        }
        return _line({"type": "item_completed", "thread_id": self._thread_id, "turn_id": self._turn, "item": item})

    async def submit(self, thought: Thought) -> Submission:
        """A thought during a turn joins it (steered); else it starts a turn."""
        self._check_alive()
        async with self._lock:
            if self._turn is not None:
                self._codex.sends.append((thought.id, thought.text))
                self._write(self._recorded(thought.id, thought.text))
                return "steered"
            await self._start_turn(thought)
            return "started"

    async def _start_turn(self, thought: Thought) -> None:
        """``refuse``: the request fails; ``die``: Codex crashes before recording it (``flaky``: is
        killed, the first time only; ``sigkill``: is killed, the first DELIVERY_ATTEMPTS times); ``hang``: the turn
        runs until the driver is closed; ``fail-late``: the driver reports a 401 before the rollout has it;
        ``fail``: the rollout has it first; anything else: an echo."""
        thought_id, text = thought.id, thought.text
        self._codex.sends.append((thought_id, text))
        if thought.images:
            self._codex.images.append((thought_id, thought.images))
        word = text.split(maxsplit=1)[0]
        if word == "refuse":
            raise DriverError("Codex refused the thought: no")
        tries = [t for t, _ in self._codex.sends].count(thought_id)
        if word == "die":
            self.kill(-11)  # the thought crashes Codex
            return
        if (word == "flaky" and tries == 1) or (word == "sigkill" and tries <= DELIVERY_ATTEMPTS):
            self.kill()
            return
        turn = self._turn = uuid.uuid4().hex
        self._events.emit(TurnStarted(turn, (thought_id,)))
        self._write(_line({"type": "task_started", "turn_id": turn}), self._recorded(thought_id, text))
        if word == "hang":
            return
        if word == "fail-late":  # the notification comes first, the rollout line a moment later
            self._end_turn("failed", classify(AUTH_ERROR))
            late = _line({"type": "task_complete", "turn_id": turn, "error": {"message": AUTH_ERROR}})
            asyncio.get_running_loop().call_later(0.3, self._write, late)
            return
        if word == "fail":
            self._write(_line({"type": "task_complete", "turn_id": turn, "error": {"message": AUTH_ERROR}}))
            self._end_turn("failed", classify(AUTH_ERROR))
            return
        self._write(
            _line({"type": "agent_message", "message": f"echo: {text}"}),
            _line({"type": "task_complete", "turn_id": turn}),
        )
        self._end_turn("completed")

    def _end_turn(self, status: TurnStatus, error: ClassifiedError | None = None) -> None:
        turn, self._turn = self._turn, None
        self._events.emit(TurnFinished(turn, status, (), error))

    def finish(self) -> None:
        """End the hanging turn with a reply."""
        turn = self._turn
        assert turn is not None
        self._write(
            _line({"type": "agent_message", "message": "done"}), _line({"type": "task_complete", "turn_id": turn})
        )
        self._end_turn("completed")

    def kill(self, returncode: int = -9) -> None:
        """Codex dies (by default SIGKILL: killed from outside; -11, SIGSEGV: it crashed)."""
        self._fail(process_error(returncode, ["ERROR codex: could not find bubblewrap"]), returncode)

    def _fail(self, error: ClassifiedError, returncode: int | None) -> None:
        if self._failed is None:
            self._failed = error
            self._failed_returncode = returncode
            self._turn = None
            self._events.emit(DriverFailed(error, returncode))

    async def cancel(self) -> bool:
        turn = self._turn
        if turn is None:
            return False
        self._write(_line({"type": "turn_aborted", "turn_id": turn, "reason": "interrupted"}))
        self._end_turn("interrupted")
        return True

    def ask_approval(self, request_id: str) -> None:
        """Codex asks the chat to approve something during the running turn."""
        assert self._turn is not None
        self._events.emit(ApprovalRequested(request_id, "run: true", None))

    async def answer_approval(self, request_id: str, approve: bool, *, for_session: bool = False) -> None:
        raise DriverError("no such request")

    async def _end_processes(self) -> None:
        self.closed = True


@dataclass
class Rig:
    """A session's world: journal, state, services; runs sessions and waits on the journal."""

    tmp: Path
    codex: FakeCodex
    journal: MemoryJournal
    services: SessionServices
    finished: list[int]
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    positions: int = 0

    def session(self, conversation: str = "c") -> Session:
        session = Session(SessionState(conversation=conversation), self.services)
        self.tasks.append(asyncio.create_task(session.run()))
        return session

    def offer(self, session: Session, text: str, *, entry_id: str | None = None, position: int | None = None) -> str:
        self.positions += 1
        entry = ThoughtEntry(id=entry_id or uuid.uuid4().hex, conversation=session.conversation, text=text)
        assert entry.id is not None
        session.offer_thought(entry, self.positions if position is None else position)
        return entry.id

    async def entries(self, conversation: str = "c") -> list[BaseEntry]:
        return [
            i.entry
            for i in await self.journal.read()
            if isinstance(i, JournalRecord) and i.entry.conversation == conversation
        ]

    async def wait(
        self, predicate: Callable[[list[BaseEntry]], bool], what: str, conversation: str = "c", timeout: float = 10.0
    ) -> list[BaseEntry]:
        deadline = time.monotonic() + timeout
        while not predicate(entries := await self.entries(conversation)):
            if time.monotonic() > deadline:
                shown = [(e.kind, getattr(e, "state", getattr(e, "code", "")), e.text[:60]) for e in entries]
                raise AssertionError(f"timed out waiting for {what}: {shown}")
            await asyncio.sleep(0.02)
        return entries


def make_rig(tmp_path: Path, *, slots: int = 4, **settings: Any) -> Rig:
    codex = FakeCodex(tmp_path / "rollouts")
    codex.root.mkdir()
    journal = MemoryJournal()
    store = StateStore(tmp_path / "state", durability="never")
    store.prepare()
    finished: list[int] = []
    values: dict[str, Any] = {"workspace": tmp_path, "restart_backoff": 0.05, "kill_grace": 0.5, **settings}
    services = SessionServices(
        settings=Settings(**values),
        journal=journal,
        store=store,
        slots=SlotPool(slots),
        processes=ProcessRegistry(tmp_path / "state"),
        make_driver=codex,
        locate_rollout=codex.locate,
        finish_thought=finished.append,
        saved_cursor=lambda: 0,
        writer=DaemonWriter(journal, set()),
    )
    return Rig(tmp_path, codex, journal, services, finished)


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    made = make_rig(tmp_path)
    yield made
    await stop(made)


async def stop(rig: Rig) -> None:
    for task in rig.tasks:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    for driver in rig.codex.drivers:
        await driver.aclose()


def errors(entries: list[BaseEntry]) -> list[ErrorEntry]:
    return [e for e in entries if isinstance(e, ErrorEntry)]


def turn_ends(entries: list[BaseEntry]) -> list[StatusEntry]:
    return [e for e in entries if isinstance(e, StatusEntry) and e.state in TURN_END_STATES]


def replies(entries: list[BaseEntry]) -> list[str]:
    return [e.text for e in entries if e.kind == "response"]


async def test_thoughts_are_delivered_once_in_order(rig: Rig) -> None:
    session = rig.session()
    ids = [rig.offer(session, f"hello {n}") for n in range(3)]
    entries = await rig.wait(lambda es: len(replies(es)) == 3, "three replies")
    assert replies(entries) == [f"echo: hello {n}" for n in range(3)]
    assert [thought for thought, _ in rig.codex.sends] == ids
    await rig.wait(lambda es: sorted(rig.finished) == [1, 2, 3], "every delivery")
    assert session.state.in_flight is None and set(session.state.delivered) == set(ids)
    assert len(turn_ends(entries)) == 3 and not errors(entries)
    # A thought read again after a restart (same id, same position) is not sent again.
    session.offer_thought(ThoughtEntry(id=ids[0], conversation="c", text="hello 0"), 1)
    await asyncio.sleep(0.2)
    assert len(rig.codex.sends) == 3


@pytest.mark.parametrize("how", ["die", "refuse"])
async def test_a_thought_is_dropped_after_exactly_the_documented_attempts(rig: Rig, how: str) -> None:
    session = rig.session()
    thought = rig.offer(session, f"{how} now")
    entries = await rig.wait(lambda es: any("could not be handed" in e.text for e in errors(es)), "the give-up")
    assert [t for t, _ in rig.codex.sends] == [thought] * DELIVERY_ATTEMPTS
    gave_up = [e for e in errors(entries) if "could not be handed" in e.text]
    assert len(gave_up) == 1 and f"{DELIVERY_ATTEMPTS} tries" in gave_up[0].text
    await rig.wait(lambda es: rig.finished == [1], "the thought finished")  # ingress may move past it now
    # The conversation goes on: the next thought is delivered on the first try.
    rig.offer(session, "hello after")
    await rig.wait(lambda es: "echo: hello after" in replies(es), "the next reply")
    assert len(rig.codex.sends) == DELIVERY_ATTEMPTS + 1


async def test_a_thought_is_not_dropped_when_codex_is_killed_from_outside_during_its_hand_overs(rig: Rig) -> None:
    """kill -9 of the shared app-server is not the thought's fault: however often it hits the
    hand-over, the thought is sent again (after the backoff) and never dropped."""
    session = rig.session()
    thought = rig.offer(session, "sigkill me")
    entries = await rig.wait(lambda es: "echo: sigkill me" in replies(es), "the reply", timeout=20)
    assert [t for t, _ in rig.codex.sends] == [thought] * (DELIVERY_ATTEMPTS + 1)
    assert not [e for e in errors(entries) if "could not be handed" in e.text]


async def test_a_thought_codex_did_not_record_is_sent_again(rig: Rig) -> None:
    session = rig.session()
    thought = rig.offer(session, "flaky one")
    entries = await rig.wait(lambda es: "echo: flaky one" in replies(es), "the reply after the retry")
    assert [t for t, _ in rig.codex.sends] == [thought, thought]
    assert [e.code for e in errors(entries)] == ["PROCESS_EXITED"]
    await rig.wait(lambda es: rig.finished == [1], "the delivery")  # egress's note may come after the reply
    assert session.state.delivered == {thought: 1}


@pytest.mark.parametrize("word", ["fail", "fail-late"])
async def test_a_failed_turn_gives_one_error_and_one_end_whoever_writes_first(rig: Rig, word: str) -> None:
    session = rig.session()
    rig.offer(session, f"{word} please")
    await rig.wait(lambda es: bool(turn_ends(es)) and bool(errors(es)), "the error and the turn end")
    await asyncio.sleep(1.5)  # the later writer has had its chance
    entries = await rig.entries()
    assert [e.code for e in errors(entries)] == ["AUTH"]
    assert [e.state for e in turn_ends(entries)] == ["turn_failed"]


async def test_codex_dying_mid_turn_ends_the_turn_once_and_resumes(rig: Rig) -> None:
    session = rig.session()
    rig.offer(session, "hang on")
    await rig.wait(lambda es: any(getattr(e, "state", "") == "turn_started" for e in es), "the turn start")
    rig.codex.drivers[-1].kill()
    entries = await rig.wait(lambda es: bool(turn_ends(es)), "the turn end")
    assert [e.code for e in errors(entries)] == ["PROCESS_EXITED"]
    assert "bubblewrap" not in errors(entries)[0].text and "signal 9" in errors(entries)[0].text
    assert [e.state for e in turn_ends(entries)] == ["turn_failed"]
    await rig.wait(lambda es: any(getattr(e, "state", "") == "session_resumed" for e in es), "the resume")
    rig.offer(session, "hello again")
    entries = await rig.wait(lambda es: "echo: hello again" in replies(es), "the next reply")
    assert len(turn_ends(entries)) == 2 and len(errors(entries)) == 1
    assert len(rig.codex.sends) == 2  # the thought Codex had recorded is not sent again


async def test_session_started_and_resumed_say_so_with_their_thread(rig: Rig) -> None:
    """Issue 10 item 7: ``session_started`` had an empty text; both statuses name the thread."""
    session = rig.session()
    rig.offer(session, "hello")
    await rig.wait(lambda es: len(replies(es)) == 1, "the reply")
    thread = rig.codex.drivers[-1].thread_id
    rig.codex.drivers[-1].kill()  # while idle: the thread is resumed with the next thought
    rig.offer(session, "hello again")
    entries = await rig.wait(lambda es: any(getattr(e, "state", "") == "session_resumed" for e in es), "the resume")
    sessions = [
        (e.state, e.thread_id, e.text)
        for e in entries
        if isinstance(e, StatusEntry) and e.state in ("session_started", "session_resumed")
    ]
    assert sessions == [
        ("session_started", thread, f"Codex session started (thread {thread})"),
        ("session_resumed", thread, f"Codex session resumed (thread {thread})"),
    ]


async def test_codex_dying_while_idle_writes_nothing_and_resumes_on_the_next_thought(rig: Rig) -> None:
    """The shared app-server dies while this conversation has no turn on it: no error entry, no
    restart of its own; the thread is resumed when the next thought comes."""
    session = rig.session()
    rig.offer(session, "hello")
    await rig.wait(lambda es: "echo: hello" in replies(es), "the reply")
    rig.codex.drivers[-1].kill()
    await asyncio.sleep(0.5)  # (restart_backoff is 0.05 s: an eager restart would have happened by now)
    entries = await rig.entries()
    assert errors(entries) == [] and not session.live and len(rig.codex.drivers) == 1
    rig.offer(session, "hello again")
    entries = await rig.wait(lambda es: "echo: hello again" in replies(es), "the next reply")
    assert errors(entries) == [] and len(rig.codex.drivers) == 2
    assert rig.codex.drivers[1].thread_id == rig.codex.drivers[0].thread_id


async def test_stopping_the_session_mid_turn_ends_the_turn_once(rig: Rig) -> None:
    session = rig.session()
    rig.offer(session, "hang on")
    await rig.wait(lambda es: any(getattr(e, "state", "") == "turn_started" for e in es), "the turn start")
    await rig.wait(lambda es: bool(rig.finished), "the delivery", timeout=5)
    await session.stop(0.0)
    entries = await rig.wait(lambda es: bool(turn_ends(es)), "the turn end")
    assert [e.state for e in turn_ends(entries)] == ["turn_aborted"]


async def test_a_reused_thought_id_is_reported_once(rig: Rig) -> None:
    session = rig.session()
    rig.offer(session, "hello first", entry_id="same", position=1)
    await rig.wait(lambda es: "echo: hello first" in replies(es), "the first reply")
    rig.offer(session, "hello second", entry_id="same", position=2)
    entries = await rig.wait(lambda es: bool(errors(es)), "the duplicate report")
    assert [e.code for e in errors(entries)] == ["REFUSED"] and "'same'" in errors(entries)[0].text
    rig.offer(session, "hello second", entry_id="same", position=2)  # read again after a restart
    rig.offer(session, "hello first", entry_id="same", position=1)
    await asyncio.sleep(0.3)
    entries = await rig.entries()
    assert len(errors(entries)) == 1 and len(rig.codex.sends) == 1


async def test_steering_adds_a_thought_to_the_running_turn(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, mid_turn="steer")
    try:
        session = rig.session()
        first = rig.offer(session, "hang on")
        await rig.wait(lambda es: any(getattr(e, "state", "") == "turn_started" for e in es), "the turn start")
        second = rig.offer(session, "and this")
        await rig.wait(lambda es: len(rig.finished) == 2, "both delivered")
        assert [t for t, _ in rig.codex.sends] == [first, second]
        assert len(rig.codex.drivers) == 1
        rig.codex.drivers[0].finish()
        entries = await rig.wait(lambda es: bool(turn_ends(es)), "the turn end")
        assert len(turn_ends(entries)) == 1
    finally:
        await stop(rig)


async def test_an_idle_session_lets_its_thread_go_and_resumes_it(tmp_path: Path) -> None:
    """Issue 12: ``release_thread_after`` seconds after its turn an idle conversation lets its
    thread go (its driver is closed, its state kept); the next thought resumes the thread."""
    rig = make_rig(tmp_path, release_thread_after=1.0)
    try:
        session = rig.session()
        rig.offer(session, "hello")
        await rig.wait(lambda es: any(getattr(e, "state", "") == "session_ended" for e in es), "the release", timeout=5)
        assert rig.codex.drivers[0].closed and not session.live
        rig.offer(session, "hello again")
        entries = await rig.wait(lambda es: "echo: hello again" in replies(es), "the reply after resuming")
        assert len(rig.codex.drivers) == 2 and rig.codex.drivers[1].thread_id == rig.codex.drivers[0].thread_id
        assert any(getattr(e, "state", "") == "session_resumed" for e in entries)
    finally:
        await stop(rig)


async def test_a_running_turn_with_a_pending_approval_keeps_its_thread(tmp_path: Path) -> None:
    """Issue 12: with ``release_thread_after = 0`` a thread is let go as soon as its turn is over,
    but never while the turn runs or an approval waits for its answer."""
    rig = make_rig(tmp_path, release_thread_after=0.0)
    try:
        session = rig.session()
        rig.offer(session, "hang on")
        await rig.wait(lambda es: any(getattr(e, "state", "") == "turn_started" for e in es), "the turn")
        driver = rig.codex.drivers[0]
        driver.ask_approval("req-1")
        await rig.wait(lambda es: any(e.kind == "approval_request" for e in es), "the approval request")
        for _ in range(20):  # the session's loop goes round, once per message (answers to nothing asked)
            session.offer_approval(ApprovalEntry(conversation="c", request_id="unknown", decision="approve"))
            await asyncio.sleep(0.01)
        assert session.live and not driver.closed
        driver.finish()
        await rig.wait(lambda es: any(getattr(e, "state", "") == "session_ended" for e in es), "the release")
        assert driver.closed and not session.live
    finally:
        await stop(rig)


async def test_an_idle_session_gives_its_slot_to_a_waiting_one(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, slots=1)
    try:
        red, blue = rig.session("red"), rig.session("blue")
        rig.offer(red, "hello red")
        await rig.wait(lambda es: "echo: hello red" in replies(es), "red's reply", conversation="red")
        rig.offer(blue, "hello blue")
        entries = await rig.wait(lambda es: "echo: hello blue" in replies(es), "blue's reply", conversation="blue")
        assert any(getattr(e, "state", "") == "session_waiting" for e in entries)
        assert rig.codex.drivers[0].closed and not red.live and blue.live
    finally:
        await stop(rig)


async def test_abandoning_a_job_gives_its_job_slot_back(rig: Rig) -> None:
    """A daemon that lost a job's lease lets its Codex go and gives the slot back to the pool the job
    took it from (``max_jobs``); it gave it to the chat pool, which it never held, and the job slot leaked."""
    job_slots = rig.services.job_slots = SlotPool(1)
    session = rig.session("job:one")
    rig.offer(session, "hello job")
    await rig.wait(lambda es: "echo: hello job" in replies(es), "the job's reply", conversation="job:one")
    assert session.live and not job_slots.try_acquire("job:two")  # job:one holds the one job slot
    task = rig.tasks.pop()
    task.cancel()  # (the session's task is cancelled before abandon)
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await session.abandon()
    assert rig.codex.drivers[0].closed and not session.live
    assert job_slots.try_acquire("job:two")


async def test_a_crashing_session_backs_off_and_reports_once(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    rig.codex.open_error = RuntimeError("a bug in opening")
    async with asyncio.TaskGroup() as group:
        manager = SessionManager(rig.services, group)
        manager.route_thought(ThoughtEntry(id="t1", conversation="c", text="hello"), 1)
        await asyncio.sleep(4.5)
        opens = len(rig.codex.drivers)
        entries = await rig.entries()
        await manager.shutdown(grace=0.1, drain=0.1)
    # Restarts after 1 s, then 2 s, then 4 s: three tries in 4.5 s (five at one a second), one report.
    assert 2 <= opens <= 3, opens
    assert len(errors(entries)) == 1 and "a bug in opening" in errors(entries)[0].text


def test_backoff_doubles_up_to_the_limit() -> None:
    assert [backoff(0.5, n) for n in range(1, 5)] == [0.5, 1.0, 2.0, 4.0]
    assert backoff(1.0, 0) == 0.0 and backoff(1.0, 10_000) == MAX_BACKOFF


def test_a_repeating_failure_is_reported_once_then_summarised() -> None:
    quiet = RepeatFilter(every=300.0)
    assert quiet.note("boom", now=0.0) == ""
    assert [quiet.note("boom", now=t) for t in (1.0, 60.0, 299.0)] == [None, None, None]
    assert quiet.note("boom", now=301.0) == "(failed 4 more times in the last 5 minutes)"
    assert quiet.note("boom", now=302.0) is None
    assert quiet.note("bang", now=303.0) == ""  # a different failure is reported at once
    quiet.clear()
    assert quiet.note("bang", now=304.0) == ""


async def test_the_writer_appends_an_id_once_whoever_races_for_it() -> None:
    journal = MemoryJournal()
    writer = DaemonWriter(journal, {"known"}, recent=2)
    results = await asyncio.gather(*(writer.append(ErrorEntry(id="turn", text=str(n))) for n in range(5)))
    assert sum(r is not None for r in results) == 1
    assert await writer.append(ErrorEntry(id="known")) is None
    assert await writer.append(ErrorEntry()) is not None and await writer.append(ErrorEntry()) is not None
    for entry_id in ("a", "b", "c"):
        assert await writer.append(ErrorEntry(id=entry_id)) is not None
    assert not writer.written("turn") and writer.written("c") and writer.written("known")  # bounded
    assert len(await journal.read()) == 6
