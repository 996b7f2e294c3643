"""A session's thread options (``cwd`` inside ``workspace_roots``, ``model``, ``timeout``,
``resume_thread``, ``fork_thread``), the ``max_jobs`` bound and ``cancel`` with ``queued``, against the fake Codex
of ``test_session_units`` (issue 15, items 1 and 2)."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from test_session_units import Rig, errors, make_rig, replies, stop

from coven_codex.agent.slots import SlotPool
from coven_codex.agent.state import SessionState
from coven_codex.codex.drivers import ThreadOptions
from coven_codex.conversation.manager import SessionManager
from coven_codex.conversation.session import Session
from coven_codex.entries import BaseEntry, CancelEntry, ResetEntry, StatusEntry, ThoughtEntry


@pytest.fixture
async def roots(tmp_path: Path) -> tuple[Path, Path]:
    """A workspace root with a project in it, and a directory outside every root."""
    root = tmp_path / "roots" / "projects"
    (root / "app").mkdir(parents=True)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    return root, outside


@pytest.fixture
async def rig(tmp_path: Path, roots: tuple[Path, Path]) -> AsyncIterator[Rig]:
    workspace = tmp_path / "workspace"  # (the daemon's workspace is always allowed: away from the roots)
    workspace.mkdir()
    made = make_rig(tmp_path, workspace=workspace, workspace_roots=[roots[0]], turn_timeout=60)
    yield made
    await stop(made)


def think(rig: Rig, session: Session, text: str, **options: object) -> str:
    rig.positions += 1
    entry = ThoughtEntry(id=uuid.uuid4().hex, conversation=session.conversation, text=text, **options)  # type: ignore[arg-type]
    assert entry.id is not None
    session.offer_thought(entry, rig.positions)
    return entry.id


def refused(entries: list[BaseEntry]) -> list[str]:
    return [e.text for e in errors(entries) if e.code == "REFUSED"]


async def test_a_cwd_inside_a_workspace_root_is_the_threads_directory(rig: Rig, roots: tuple[Path, Path]) -> None:
    session = rig.session()
    think(rig, session, "hello", cwd=str(roots[0] / "app"), model="gpt-test", timeout=5)
    await rig.wait(lambda es: "echo: hello" in replies(es), "the reply")
    assert rig.codex.options == [
        ThreadOptions(workspace=str((roots[0] / "app").resolve()), model="gpt-test", turn_timeout=5.0)
    ]
    assert session.state.workspace == str((roots[0] / "app").resolve())
    # Later thoughts of the thread keep its options; theirs are ignored.
    think(rig, session, "again", model="other")
    await rig.wait(lambda es: "echo: again" in replies(es), "the second reply")
    assert not refused(await rig.entries()) and session.state.model == "gpt-test" and len(rig.codex.options) == 1


async def test_without_a_cwd_the_daemons_workspace_is_used(rig: Rig) -> None:
    session = rig.session()
    think(rig, session, "hello")
    await rig.wait(lambda es: "echo: hello" in replies(es), "the reply")
    assert rig.codex.options == [ThreadOptions()]


@pytest.mark.parametrize("where", ["outside", "symlink", "relative", "missing", "dotdot"])
async def test_a_cwd_outside_every_root_is_refused_with_an_error(
    rig: Rig, roots: tuple[Path, Path], where: str
) -> None:
    root, outside = roots
    if where == "symlink":  # inside the root by its name, outside by its real path
        (root / "link").symlink_to(outside)
    cwd = {
        "outside": str(outside),
        "symlink": str(root / "link"),
        "relative": "projects/app",
        "missing": str(root / "nope"),
        "dotdot": str(root / ".." / ".." / "elsewhere"),
    }[where]
    session = rig.session()
    thought = think(rig, session, "hello", cwd=cwd)
    entries = await rig.wait(lambda es: bool(refused(es)), "the refusal")
    (error,) = errors(entries)
    assert error.in_reply_to == thought and error.id == "refused@1" and "workspace_roots" in error.hint
    assert rig.codex.sends == [] and rig.finished == [1]
    # The conversation goes on in the daemon's workspace.
    think(rig, session, "next")
    await rig.wait(lambda es: "echo: next" in replies(es), "the next reply")
    assert rig.codex.options == [ThreadOptions()]


async def test_the_daemons_workspace_is_always_allowed_and_a_refusal_says_how_to_add_a_root(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)  # no workspace_roots: the workspace (tmp_path) alone is allowed
    (tmp_path / "sub").mkdir()
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    try:
        session = rig.session()
        think(rig, session, "hello", cwd=str(tmp_path / "sub"))
        await rig.wait(lambda es: "echo: hello" in replies(es), "the reply")
        assert rig.codex.options == [ThreadOptions(workspace=str((tmp_path / "sub").resolve()))]
        other = rig.session("d")
        think(rig, other, "out", cwd=str(outside))
        entries = await rig.wait(lambda es: bool(refused(es)), "the refusal", conversation="d")
        (error,) = [e for e in errors(entries) if e.code == "REFUSED"]
        assert "outside the workspace and every root" in error.text
        assert "--workspace-root DIR" in error.hint and "workspace_roots" in error.hint
    finally:
        await stop(rig)


async def test_a_timeout_is_bounded_by_turn_timeout_and_must_be_positive(rig: Rig) -> None:
    session = rig.session()
    think(rig, session, "hello", timeout=10_000)
    await rig.wait(lambda es: "echo: hello" in replies(es), "the reply")
    assert rig.codex.options == [ThreadOptions(turn_timeout=60.0)]
    other = rig.session("d")
    think(rig, other, "bad", timeout=-1)
    entries = await rig.wait(lambda es: bool(refused(es)), "the refusal", conversation="d")
    assert "timeout must be a positive" in refused(entries)[0]


async def test_fork_thread_forks_and_is_refused_where_the_driver_cannot_fork(rig: Rig) -> None:
    session = rig.session()
    think(rig, session, "hello", fork_thread="thread-1")
    await rig.wait(lambda es: "echo: hello" in replies(es), "the reply")
    assert rig.codex.options == [ThreadOptions(fork_from="thread-1")]
    assert session.state.fork_from is None  # the fork exists now; a restart resumes it
    rig.codex.plan = dataclasses.replace(rig.codex.plan, forks_threads=False)
    other = rig.session("d")
    think(rig, other, "hello", fork_thread="thread-1")
    entries = await rig.wait(lambda es: bool(refused(es)), "the refusal", conversation="d")
    assert "app-server" in refused(entries)[0]


async def test_resume_thread_and_fork_thread_together_are_refused(rig: Rig) -> None:
    session = rig.session()
    think(rig, session, "hello", resume_thread="thread-1", fork_thread="thread-1")
    entries = await rig.wait(lambda es: bool(refused(es)), "the refusal")
    assert "not both" in refused(entries)[0] and rig.codex.options == []


async def test_resume_thread_continues_that_thread_on_any_driver(rig: Rig) -> None:
    rig.codex.plan = dataclasses.replace(rig.codex.plan, forks_threads=False)  # (exec resumes too)
    session = rig.session()
    think(rig, session, "hello", resume_thread="thread-1")
    await rig.wait(lambda es: "echo: hello" in replies(es), "the reply")
    assert rig.codex.options == [ThreadOptions()] and session.state.thread_id == "thread-1"


async def test_a_reset_names_the_next_threads_directory_and_one_outside_is_refused(
    rig: Rig, roots: tuple[Path, Path]
) -> None:
    session = rig.session()
    think(rig, session, "first", model="m1")
    await rig.wait(lambda es: "echo: first" in replies(es), "the first reply")
    session.offer_reset(ResetEntry(id="r-bad", conversation="c", cwd=str(roots[1])), 10)
    entries = await rig.wait(lambda es: bool(refused(es)), "the refused reset")
    assert errors(entries)[0].id == "refused@10" and 10 in rig.finished
    assert session.state.thread_id is not None  # nothing changed
    session.offer_reset(ResetEntry(id="r-good", conversation="c", cwd=str(roots[0] / "app")), 11)
    await rig.wait(lambda es: any(getattr(e, "state", "") == "session_reset" for e in es), "the reset")
    think(rig, session, "second")
    await rig.wait(lambda es: "echo: second" in replies(es), "the second reply")
    assert rig.codex.options[-1] == ThreadOptions(workspace=str((roots[0] / "app").resolve()))


def cancelled(entries: list[BaseEntry]) -> list[StatusEntry]:
    return [e for e in entries if isinstance(e, StatusEntry) and e.state == "thought_cancelled"]


async def test_jobs_wait_for_max_jobs_and_a_cancel_drops_a_waiting_job(tmp_path: Path) -> None:
    """Jobs have a bound of their own; a job waiting for it still reads its inbox, so a cancel with
    ``queued`` drops its thought (it never reaches Codex) and the slot goes to the next job."""
    rig = make_rig(tmp_path)
    rig.services.job_slots = SlotPool(1)
    try:
        running = rig.session("job:a")
        think(rig, running, "hang on")
        await rig.wait(lambda es: bool(rig.codex.sends), "the first job running", conversation="job:a")
        waiting = rig.session("job:b")
        thought = think(rig, waiting, "never sent")
        third = rig.session("job:c")
        think(rig, third, "third")
        await rig.wait(
            lambda es: any(getattr(e, "state", "") == "session_waiting" for e in es), "waiting", conversation="job:b"
        )
        assert "max_jobs = 1" in next(e for e in await rig.entries("job:b") if e.kind == "status").text
        chat = rig.session("chat")  # chat conversations are not held back by jobs
        think(rig, chat, "hello")
        await rig.wait(lambda es: "echo: hello" in replies(es), "the chat reply", conversation="chat")
        waiting.offer_cancel(CancelEntry(conversation="job:b", queued=True))
        entries = await rig.wait(lambda es: bool(cancelled(es)), "the cancelled thought", conversation="job:b")
        (status,) = cancelled(entries)
        assert status.in_reply_to == thought and thought in waiting.state.delivered
        running.offer_cancel(CancelEntry(conversation="job:a", queued=True))  # interrupts the running turn
        await rig.wait(lambda es: "echo: third" in replies(es), "the third job", conversation="job:c")
        assert "never sent" not in [text for _, text in rig.codex.sends]
        # Read again after a restart (before this run: not live), the thought is not sent either.
        again = Session(SessionState.model_validate(waiting.state.model_dump()), rig.services)
        rig.tasks.append(asyncio.create_task(again.run()))
        assert again.offer_thought(ThoughtEntry(id=thought, conversation="job:b", text="never sent"), 2) is False
    finally:
        await stop(rig)


async def test_a_cancel_from_before_a_restart_drops_queued_thoughts_without_a_cancel_ignored(rig: Rig) -> None:
    session = rig.session("job:x")
    session.offer_drop_queued()
    think(rig, session, "hello")
    await rig.wait(lambda es: "echo: hello" in replies(es), "the reply", conversation="job:x")
    entries = await rig.entries("job:x")
    assert not [e for e in entries if getattr(e, "state", "") == "cancel_ignored"]


async def test_the_manager_has_the_holder_let_the_thread_go_before_the_taker_names_it(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    async with asyncio.TaskGroup() as group:
        manager = SessionManager(rig.services, group)
        rig.services.hand_thread = manager.hand_thread
        manager.route_thought(ThoughtEntry(id="a1", conversation="a", text="first"), 1)
        await rig.wait(lambda es: "echo: first" in replies(es), "a's reply", conversation="a")
        thread = manager.sessions["a"].state.thread_id
        assert thread is not None and manager.holders(thread) == ["a"]
        manager.route_thought(ThoughtEntry(id="b1", conversation="b", text="second", resume_thread=thread), 2)
        await rig.wait(lambda es: "echo: second" in replies(es), "b's reply", conversation="b")
        moved = [e for e in await rig.entries("a") if isinstance(e, StatusEntry) and e.state == "thread_moved"]
        assert [(m.id, m.thread_id) for m in moved] == [("thread-moved@2", thread)] and "'b'" in moved[0].text
        assert manager.holders(thread) == ["b"] and manager.sessions["a"].state.thread_id is None
        assert rig.services.store.load("a").thread_id is None and rig.services.store.load("b").thread_id == thread
        await manager.shutdown(grace=0.1, drain=0.1)
