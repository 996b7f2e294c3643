"""Chat ``/resume``: the earlier conversations' Codex threads a user may continue, read from the journal.

A user may continue a thread seen in a conversation they took part in: one where a thought of theirs
was written by this adapter (its ``origin``, and ``<platform>:<user id>`` as ``sender_id``, which the runner
puts on every thought; a display name is never trusted). An admin may continue any thread. ``/resume``
alone lists them (newest first, at most :data:`LISTED`); ``/resume THREAD_OR_CONVERSATION`` gives the
``reset`` that makes this chat's conversation take that thread over (its ``resume_thread``; the
daemon has any other conversation holding the thread let it go first, docs/journal-protocol.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from coven_codex.adapters.kit.history import SENDER_ID_FIELD
from coven_codex.entries import BaseEntry, ResetEntry, ThoughtEntry
from coven_codex.support.limits import cut

ORIGIN_FIELD = "origin"
"""Extra field the runner puts on the entries it appends: ``<adapter name>``."""
LISTED = 10
"""Threads ``/resume`` lists at most."""
MIN_PREFIX = 8
"""A thread id may be given by a unique prefix of at least this many characters."""


@dataclass(slots=True)
class SeenThread:
    """A Codex thread as the journal shows it: the conversation it was last seen in, and when."""

    thread_id: str
    conversation: str
    last: datetime
    conversations: set[str] = field(default_factory=set)
    """Every conversation it was seen in (moved threads are seen in several)."""


@dataclass(slots=True)
class ThreadIndex:
    """The threads of a journal and who took part in which conversation (module docstring)."""

    threads: dict[str, SeenThread] = field(default_factory=dict)
    participants: dict[str, set[tuple[str, str]]] = field(default_factory=dict)
    """Conversation → ``(origin, sender_id)`` of everyone whose thought is in it."""
    latest: dict[str, str] = field(default_factory=dict)
    """Conversation → the thread it was last seen with."""
    topics: dict[str, str] = field(default_factory=dict)
    """Conversation → the newest thought's text (cut), to recognise it by."""

    def add(self, entry: BaseEntry) -> None:
        """Take one journal entry into account."""
        conversation = entry.conversation
        if isinstance(entry, ThoughtEntry):
            extra = entry.model_extra or {}
            origin, sender_id = extra.get(ORIGIN_FIELD), extra.get(SENDER_ID_FIELD)
            if isinstance(origin, str) and isinstance(sender_id, str):
                self.participants.setdefault(conversation, set()).add((origin, sender_id))
            self.topics[conversation] = cut(" ".join(entry.text.split()), 60)
            return
        thread = getattr(entry, "thread_id", None)
        if isinstance(entry, ResetEntry) or not isinstance(thread, str) or not thread:
            return
        seen = self.threads.get(thread)
        if seen is None:
            seen = self.threads[thread] = SeenThread(thread, conversation, entry.ts)
        seen.conversation, seen.last = conversation, max(seen.last, entry.ts)
        seen.conversations.add(conversation)
        self.latest[conversation] = thread

    def allowed(self, thread: SeenThread, *, origin: str, user_id: str, admin: bool) -> bool:
        """Whether the user took part in a conversation the thread was seen in (or is an admin)."""
        if admin:
            return True
        return any((origin, user_id) in self.participants.get(c, ()) for c in thread.conversations)

    def resumable(self, *, origin: str, user_id: str, admin: bool, here: str) -> list[SeenThread]:
        """The threads the user may continue, newest first, at most :data:`LISTED` (this conversation's
        own thread left out)."""
        found = [
            t
            for t in self.threads.values()
            if self.allowed(t, origin=origin, user_id=user_id, admin=admin) and self.latest.get(here) != t.thread_id
        ]
        found.sort(key=lambda t: t.last, reverse=True)
        return found[:LISTED]

    def find(self, wanted: str) -> SeenThread | None:
        """The thread ``wanted`` names: a thread id, a unique prefix of one, or a conversation (its latest thread)."""
        if wanted in self.threads:
            return self.threads[wanted]
        if wanted in self.latest:
            return self.threads[self.latest[wanted]]
        if len(wanted) >= MIN_PREFIX:
            matches = [t for t in self.threads.values() if t.thread_id.startswith(wanted)]
            if len(matches) == 1:
                return matches[0]
        return None


@dataclass(frozen=True, slots=True)
class ResumeAnswer:
    """What ``/resume`` does: the reply to show and, when a thread is taken over, the ``reset`` to append."""

    reply: str
    reset: ResetEntry | None = None


def resume_command(
    index: ThreadIndex, argument: str, conversation: str, *, sender: str, origin: str, user_id: str, admin: bool
) -> ResumeAnswer:
    """``/resume`` (a list) or ``/resume THREAD_OR_CONVERSATION`` (a take-over) for ``conversation``,
    from ``index`` (what the journal showed so far)."""
    wanted = argument.strip()
    if not wanted:
        threads = index.resumable(origin=origin, user_id=user_id, admin=admin, here=conversation)
        if not threads:
            return ResumeAnswer("no earlier Codex thread you took part in; /new starts a fresh one here")
        lines = ["threads you can continue here (newest first); /resume THREAD_OR_CONVERSATION takes one over:"]
        for t in threads:
            topic = index.topics.get(t.conversation, "")
            shown = f' "{topic}"' if topic else ""
            lines.append(f"  {t.thread_id}  {cut(t.conversation, 60)}  {t.last:%Y-%m-%d %H:%M} UTC{shown}")
        return ResumeAnswer("\n".join(lines))
    thread = index.find(wanted)
    if thread is None or not index.allowed(thread, origin=origin, user_id=user_id, admin=admin):
        # (the same answer whether it exists or not: a stranger learns nothing of others' threads)
        return ResumeAnswer(
            f"no Codex thread {cut(wanted, 80)!r} you took part in; /resume lists the ones you can continue"
        )
    if index.latest.get(conversation) == thread.thread_id:
        return ResumeAnswer(f"this conversation already continues Codex thread {thread.thread_id}")
    reset = ResetEntry(conversation=conversation, sender=sender, resume_thread=thread.thread_id)
    moved = f" from {cut(thread.conversation, 80)}" if thread.conversation != conversation else ""
    return ResumeAnswer(
        f"this conversation takes over Codex thread {thread.thread_id}{moved}; your next message continues it",
        reset,
    )
