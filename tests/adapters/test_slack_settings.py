"""``/project``, ``/model``, ``/mode`` on Slack (issue 30 item 3): the real ``coven-codex slack`` process against
the wire-level fake Slack (``slack_fake.py``). The ``/codex`` slash command and a mention's ``/model`` each append
one ``settings`` entry with who asked; the daemon's ``settings`` answer is shown in the thread and ``/status``
shows what it carries; a stranger's command is refused and appends nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from running import append, running
from slack_fake import TEAM, text_of
from slack_under_test import SlackAdapter

from coven_codex.adapters.kit.resume import ORIGIN_FIELD
from coven_codex.entries import (
    BaseEntry,
    CancelEntry,
    ConversationSettings,
    SettingsEntry,
    StatusEntry,
    ThoughtEntry,
)
from coven_codex.journal import START, FileJournal, JournalRecord

E = TypeVar("E", bound=BaseEntry)


@pytest.fixture
async def slack(tmp_path: Path) -> AsyncIterator[SlackAdapter]:
    async with running(SlackAdapter(tmp_path)) as adapter:
        yield adapter


async def _entries(adapter: SlackAdapter, kind: type[E], count: int, timeout: float = 20) -> list[E]:
    """The first ``count`` entries of ``kind`` in the journal, as soon as the adapter appended them."""
    found: list[E] = []
    journal = FileJournal(adapter.journal)
    try:
        async with asyncio.timeout(timeout):
            async for item in journal.tail(START):
                if isinstance(item, JournalRecord) and isinstance(item.entry, kind):
                    found.append(item.entry)
                    if len(found) == count:
                        return found
    except TimeoutError:
        raise AssertionError(f"{len(found)} {kind.__name__}(s) within {timeout} s, not {count}: {found}") from None
    finally:
        await journal.aclose()
    raise AssertionError("the journal's tail ended")


async def _all(adapter: SlackAdapter, kind: type[E]) -> list[E]:
    """Every entry of ``kind`` in the journal now."""
    journal = FileJournal(adapter.journal)
    try:
        return [i.entry for i in await journal.read() if isinstance(i, JournalRecord) and isinstance(i.entry, kind)]
    finally:
        await journal.aclose()


def _origin(entry: BaseEntry) -> object:
    return (entry.model_extra or {}).get(ORIGIN_FIELD)


def _shown(adapter: SlackAdapter, words: str) -> list[dict[str, Any]]:
    return [m for m in adapter.fake.bot_messages("CGENERAL") if words in text_of(m)]


async def test_settings_commands_append_settings_entries_and_status_shows_the_daemon_s_answer(
    slack: SlackAdapter,
) -> None:
    fake = slack.fake
    root = slack.roots["general"]
    conversation = f"slack:{TEAM}/CGENERAL/{root}"
    await fake.mention("CGENERAL", "UANN", "start here", root)  # the thread /codex acts on
    await _entries(slack, ThoughtEntry, 1)
    await fake.acked(await fake.slash("CGENERAL", "UANN", "project api"))
    await _entries(slack, SettingsEntry, 1)
    await fake.mention("CGENERAL", "UBOB", "/model gpt-5.1-codex", root)
    await _entries(slack, SettingsEntry, 2)
    await fake.acked(await fake.slash("CGENERAL", "UANN", "mode"))
    asked = await _entries(slack, SettingsEntry, 3)
    assert [(e.conversation, _origin(e), e.project, e.model, e.mode, e.sender) for e in asked] == [
        (conversation, "slack", "api", None, None, "ann (UANN)"),
        (conversation, "slack", None, "gpt-5.1-codex", None, "bob (UBOB)"),
        (conversation, "slack", None, None, None, "ann (UANN)"),
    ]
    await fake.wait_for(lambda: bool(_shown(slack, "asking the daemon for the mode")))
    for words in ("project api sent", "model gpt-5.1-codex sent", "asking the daemon for the mode"):
        (said,) = _shown(slack, words)
        assert said["thread_ts"] == root, said
    # The daemon's answer: shown in the thread, and what /status shows from then on.
    answer = StatusEntry(
        state="settings",
        conversation=conversation,
        settings=ConversationSettings(project="api", model="gpt-5.1-codex", mode="ask"),
        text="project: api; model: gpt-5.1-codex; mode: ask; the next message starts a new Codex thread in api",
    )
    await append(slack.journal, answer)
    await fake.wait_for(lambda: bool(_shown(slack, "new Codex thread in api")))
    assert _shown(slack, "new Codex thread in api")[0]["thread_ts"] == root
    await fake.acked(await fake.slash("CGENERAL", "UANN", "status"))
    await fake.wait_for(lambda: bool(_shown(slack, "queued messages")))
    (status,) = _shown(slack, "queued messages")
    assert "project: api; model: gpt-5.1-codex; mode: ask" in text_of(status), text_of(status)
    assert status["thread_ts"] == root
    # Seen: /status asks the daemon no more (a command after it is handled after it: its entry comes later).
    await fake.acked(await fake.slash("CGENERAL", "UANN", "cancel"))
    await _entries(slack, CancelEntry, 1)
    assert len(await _all(slack, SettingsEntry)) == 3


async def test_a_stranger_s_settings_command_is_refused_and_appends_nothing(slack: SlackAdapter) -> None:
    fake = slack.fake
    root = slack.roots["general"]
    await fake.mention("CGENERAL", "USTRANGER", "let me in", root)  # refused; the thread is theirs for /codex
    await fake.wait_for(lambda: len(_shown(slack, "not allowed")) == 1)
    await fake.acked(await fake.slash("CGENERAL", "USTRANGER", "project api"))
    await fake.wait_for(lambda: len(_shown(slack, "not allowed")) == 2)
    await fake.mention("CGENERAL", "USTRANGER", "/model gpt-5.1-codex", root)
    await fake.wait_for(lambda: len(_shown(slack, "not allowed")) == 3)
    # An allowed user's command after them: the adapter handled the stranger's before it.
    await fake.mention("CGENERAL", "UANN", "start here", root)
    await _entries(slack, ThoughtEntry, 1)
    await fake.acked(await fake.slash("CGENERAL", "UANN", "project web"))
    await _entries(slack, SettingsEntry, 1)
    assert [(e.project, e.sender) for e in await _all(slack, SettingsEntry)] == [("web", "ann (UANN)")]
    assert "USTRANGER" not in slack.journal.read_text()
    assert not _shown(slack, "project api sent")
