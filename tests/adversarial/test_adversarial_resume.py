"""Attacks on chat ``/resume`` (coven_codex/adapters/kit/resume.py): taking over someone else's
Codex thread. Participation is matched by the adapter that wrote a thought (``origin``) and the
platform's id of its sender (``sender_id``), never by a display name."""

from __future__ import annotations

from coven_codex.adapters.kit.history import SENDER_ID_FIELD, ChatIndex
from coven_codex.adapters.kit.resume import ORIGIN_FIELD, ThreadIndex, resume_command
from coven_codex.entries import BaseEntry, StatusEntry, ThoughtEntry
from coven_codex.journal import MemoryJournal

ANNS = "0199a0b0-aaaa-7000-8000-00000000000a"
MALLORYS = "0199a0b0-bbbb-7000-8000-00000000000b"


def thought(conversation: str, sender: str, sender_id: str | None, origin: str = "slack") -> BaseEntry:
    entry = ThoughtEntry(conversation=conversation, sender=sender, text=f"{sender} writes")
    extra: dict[str, str] = {ORIGIN_FIELD: origin}
    if sender_id is not None:
        extra[SENDER_ID_FIELD] = sender_id
    return entry.model_copy(update=extra)


async def index_of(*entries: BaseEntry) -> ThreadIndex:
    """The thread index an adapter builds of a journal holding ``entries``: read at start by its
    chat index (what it reads of the journal), then given what it tails."""
    journal = MemoryJournal()
    for entry in entries:
        await journal.append(entry)
    threads = ThreadIndex()
    index = ChatIndex(also=threads.add)
    index.begin_rebuild()
    await index.rebuild(journal, await journal.end_position(), lambda _conversation: True)
    return threads


async def test_a_display_name_or_another_platforms_id_does_not_make_a_participant() -> None:
    index = await index_of(
        thought("slack:ann-dm", "Ann", "U_ANN"),
        StatusEntry(state="session_started", thread_id=ANNS, conversation="slack:ann-dm"),
        # mallory named herself "Ann"; on Discord her id is U_ANN's text: neither counts on Slack
        thought("slack:mallory", "Ann", "U_MAL"),
        thought("slack:ann-dm", "Ann", "U_MAL", origin="discord"),
        StatusEntry(state="session_started", thread_id=MALLORYS, conversation="slack:mallory"),
    )
    for wanted in (ANNS, ANNS[:10], "slack:ann-dm"):
        answer = resume_command(
            index, wanted, "slack:mallory", sender="Ann", origin="slack", user_id="U_MAL", admin=False
        )
        assert answer.reset is None and "you took part in" in answer.reply
        assert ANNS not in answer.reply or wanted == ANNS  # (only echoed back when she typed it)
    listing = resume_command(index, "", "slack:other", sender="Ann", origin="slack", user_id="U_MAL", admin=False)
    assert ANNS not in listing.reply and MALLORYS in listing.reply and listing.reset is None
    # The thread's participant, and an admin, may take it over.
    own = resume_command(index, ANNS, "slack:new", sender="Ann", origin="slack", user_id="U_ANN", admin=False)
    assert own.reset is not None and own.reset.resume_thread == ANNS
    admin = resume_command(index, "slack:ann-dm", "slack:x", sender="op", origin="slack", user_id="U_OP", admin=True)
    assert admin.reset is not None and admin.reset.resume_thread == ANNS


async def test_an_unknown_thread_and_a_stranger_s_thread_get_the_same_answer() -> None:
    index = await index_of(
        thought("slack:ann-dm", "Ann", "U_ANN"),
        StatusEntry(state="session_started", thread_id=ANNS, conversation="slack:ann-dm"),
    )
    unknown = "0199a0b0-cccc-7000-8000-00000000000c"
    answers = [
        (resume_command(index, t, "slack:m", sender="m", origin="slack", user_id="U_MAL", admin=False)).reply
        for t in (ANNS, unknown)
    ]
    assert answers[0].replace(ANNS, "T") == answers[1].replace(unknown, "T")
