"""Where a journal's conversation state lives, and the one-time move of an older version's state (issue 35).

The older state is the fixture the code before issue 35 wrote (tests/fixtures/legacy_state), or
states saved the way it saved them (``<state_dir>/sessions``, the same :class:`StateStore` format).
"""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path

import pytest
from legacy_fixture import install

from coven_codex.agent.ingress import CURSOR_NAME
from coven_codex.agent.scope import JOURNALS_DIR, ScopeError, open_scope
from coven_codex.agent.state import SESSIONS_DIR, SessionState, StateStore
from coven_codex.entries import ThoughtEntry
from coven_codex.journal import FileJournal
from coven_codex.settings import Settings
from coven_codex.validate.framework import ProbeContext, Status
from coven_codex.validate.scope_probes import probe_conversation_state


def thread_of(directory: Path, conversation: str) -> str | None:
    store = StateStore(directory)
    with contextlib.closing(store):
        return store.load(conversation).thread_id


async def test_a_journal_served_before_whose_thoughts_are_gone_refuses_and_says_how_to_go_on(tmp_path: Path) -> None:
    """Journal A rotated by hand and its old file deleted: the older state's conversations may be
    A's or another journal's. Start-up refuses, names them and the commands; following them works."""
    state_dir = tmp_path / "state"
    install(tmp_path, state_dir, tmp_path / "codex-home")
    path = tmp_path / "journal.jsonl"
    path.unlink()
    path.touch()
    journal = FileJournal(path, durability="never")
    with pytest.raises(ScopeError) as refused:
        await open_scope(journal, str(path), state_dir)
    message = str(refused.value)
    assert "2 conversation state(s) from an older coven-codex" in message
    assert "'c', 'other'" in message and "Start the daemon on the journal they served" in message
    assert len(list((state_dir / SESSIONS_DIR).iterdir())) == 2  # nothing moved, nothing lost
    move = message.split("move them to ")[1].split("(")[1].split(")", maxsplit=1)[0]
    assert move.startswith("mv ")
    subprocess.run(["/bin/sh", "-c", move], check=True)
    scope = await open_scope(journal, str(path), state_dir)
    await journal.aclose()
    assert thread_of(scope.directory, "c") == "01a21e22-da05-72a1-886e-ed0e06d79260"
    assert not (state_dir / SESSIONS_DIR).exists()


async def test_an_upgrade_right_after_a_rotation_by_hand_finds_the_conversations_in_the_rotated_file(
    tmp_path: Path,
) -> None:
    """docs/operations.md: the rotated file stays beside the journal until the daemon started once."""
    state_dir = tmp_path / "state"
    install(tmp_path, state_dir, tmp_path / "codex-home")
    path = tmp_path / "journal.jsonl"
    path.rename(tmp_path / "journal.jsonl.1")
    path.touch()
    journal = FileJournal(path, durability="never")
    scope = await open_scope(journal, str(path), state_dir)
    await journal.aclose()
    assert thread_of(scope.directory, "c") == "01a21e22-da05-72a1-886e-ed0e06d79260"
    assert not (state_dir / SESSIONS_DIR).exists()


async def test_the_older_state_is_looked_at_once_per_journal(tmp_path: Path) -> None:
    """A journal that was never served leaves the older state alone, once: later starts on it do
    not look again (and do not refuse once it has a cursor of its own)."""
    state_dir = tmp_path / "state"
    install(tmp_path, state_dir, tmp_path / "codex-home")
    journal = FileJournal(tmp_path / "b.jsonl", durability="never")
    scope = await open_scope(journal, "b", state_dir)
    assert thread_of(scope.directory, "c") is None
    await journal.append(ThoughtEntry(conversation="c", text="hi"))
    await journal.save_cursor(CURSOR_NAME, await journal.end_position())
    assert (await open_scope(journal, "b", state_dir)).directory == scope.directory
    await journal.aclose()
    assert len(list((state_dir / SESSIONS_DIR).iterdir())) == 2
    assert '"legacy_checked": true' in (scope.directory / "journal.json").read_text()


async def test_a_journal_whose_beginning_was_compacted_away_refuses_rather_than_guess(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = FileJournal(path, durability="never", segment_bytes=1024)
    first = await journal.append(ThoughtEntry(conversation="c", text="the first thought " + "x" * 200))
    for n in range(20):
        await journal.append(ThoughtEntry(conversation="other", text=f"filler {n} " + "y" * 200))
    await journal.save_cursor(CURSOR_NAME, await journal.end_position())
    assert (await journal.compact(action="delete")).removed
    state_dir = tmp_path / "state"
    old = StateStore(state_dir)  # the older version's place: <state_dir>/sessions
    old.prepare()
    old.save(SessionState(conversation="c", thread_id="thread-of-c", reply_to=first.entry.id))
    old.close()
    with pytest.raises(ScopeError, match=r"is not in what is left of this journal.*\(rotated or compacted away\)"):
        await open_scope(journal, str(path), state_dir)
    await journal.aclose()
    assert (state_dir / SESSIONS_DIR).is_dir()


async def test_validate_shows_the_state_folder_and_the_journal_identity_a_start_would_use(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    path = tmp_path / "journal.jsonl"
    settings = Settings(workspace=workspace, journal=path)
    state_dir = settings.resolved_state_dir
    install(tmp_path, state_dir, settings.resolved_codex_home)
    before = (await probe_conversation_state(ProbeContext(settings=settings))).detail
    assert f"state folder {state_dir}" in before
    assert f"journal {path} has no identity yet" in before and f"{state_dir / JOURNALS_DIR}" in before
    assert "2 conversation state(s) from an older coven-codex" in before
    assert not (tmp_path / "journal.jsonl.cursors" / "journal-id").exists()  # validate writes nothing
    journal = FileJournal(path, durability="never")
    scope = await open_scope(journal, str(path), state_dir)
    await journal.aclose()
    after = await probe_conversation_state(ProbeContext(settings=settings))
    assert after.status is Status.PASS
    assert after.detail == (
        f"state folder {state_dir}; journal {path} is {scope.identity.value}"
        f" ({tmp_path / 'journal.jsonl.cursors' / 'journal-id'}); its conversations are in {scope.directory}"
    )
