"""The kit's ``ChatIndex`` (``/list``, ``/history``): replies joined to their thoughts, bounds, senders by id,
and the same index whether fed as the journal is read or rebuilt from it at start."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from coven_codex.adapters.kit.history import (
    EXCHANGE_CHARS,
    HISTORY_DEFAULT,
    LISTED,
    MAX_HISTORY,
    SENDER_ID_FIELD,
    ChatIndex,
    IndexPhase,
    format_history,
    format_list,
    parse_count,
    settled,
)
from coven_codex.entries import BaseEntry, DeltaEntry, ResponseEntry, StatusEntry, ThoughtEntry
from coven_codex.journal import FileJournal

T0 = datetime(2026, 11, 28, 9, 0, tzinfo=UTC)


def _thought(conversation: str, text: str, *, who: str | None = "slack:U1", minute: int = 0) -> ThoughtEntry:
    thought = ThoughtEntry(
        id=f"{conversation}-{text}"[:60],
        conversation=conversation,
        sender="ann",
        text=text,
        ts=T0 + timedelta(minutes=minute),
    )
    return thought if who is None else thought.model_copy(update={SENDER_ID_FIELD: who})


def _reply(thought: ThoughtEntry, text: str, minute: int = 0) -> ResponseEntry:
    return ResponseEntry(
        conversation=thought.conversation, text=text, in_reply_to=thought.id, ts=T0 + timedelta(minutes=minute)
    )


def test_a_reply_joins_the_thought_it_answers_though_another_came_in_between() -> None:
    index = ChatIndex()
    first, second = _thought("c", "first?"), _thought("c", "second?")
    for entry in (first, second, _reply(first, "one"), _reply(second, "two"), _reply(second, "two, at last")):
        index.add(entry, mapped=True)
    assert [(e.thought, e.reply) for e in index.history("c", 5)] == [("first?", "one"), ("second?", "two, at last")]
    assert format_history(index.history("c", 1), 1).splitlines() == [
        "the last 1 exchange here, the oldest first:",
        "2026-11-28 09:00 UTC ann: second?",
        "  → codex: two, at last",
    ]


def test_list_shows_the_ten_most_recently_active_of_the_sender_s_conversations() -> None:
    index = ChatIndex()
    for n in range(LISTED + 5):
        index.add(_thought(f"c{n}", f"question {n}", minute=n), mapped=True)
    index.add(_reply(_thought("c0", "question 0"), "late answer", minute=99), mapped=True)  # c0 is active again
    listed = [s.name for s in index.listed("slack:U1")]
    assert listed == ["c0", *[f"c{n}" for n in range(LISTED + 4, 5, -1)]] and len(listed) == LISTED
    text = format_list(index.listed("slack:U1")[:1], lambda name: f"<{name}>")
    assert text.splitlines()[1] == "1. 2026-11-28 10:39 UTC · <c0> · codex: late answer"
    assert index.listed("slack:U2") == [] and "not written" in format_list([], str)


def test_a_sender_is_their_id_and_a_thought_without_one_lists_nobody() -> None:
    index = ChatIndex()
    index.add(_thought("mine", "hi", who="discord:1"), mapped=True)
    index.add(_thought("unsigned", "hi", who=None), mapped=True)  # by hand, or by an older coven-codex
    index.add(_thought("elsewhere", "hi", who=None), mapped=False)  # not this adapter's, nobody's: not kept
    assert [s.name for s in index.listed("discord:1")] == ["mine"]
    assert index.history("unsigned", 5)[0].thought == "hi" and index.history("elsewhere", 5) == []


def test_texts_are_flattened_and_cut_and_counts_bounded() -> None:
    index = ChatIndex()
    thought = _thought("c", "a\n\n```python\nprint(1)\n```\n" + "x" * 1000)
    index.add(thought, mapped=True)
    (exchange,) = index.history("c", 5)
    assert exchange.thought.startswith("a ```python print(1) ``` x") and len(exchange.thought) == EXCHANGE_CHARS
    assert exchange.thought.endswith("…") and exchange.reply is None
    for n in range(MAX_HISTORY + 5):
        index.add(_thought("c", f"q{n}"), mapped=True)
    assert len(index.history("c", 1000)) == MAX_HISTORY
    assert parse_count("") == HISTORY_DEFAULT and parse_count(" 3 ") == 3 and parse_count("999") == MAX_HISTORY
    assert all(isinstance(parse_count(bad), str) for bad in ("0", "-2", "1.5", "ten", "1e3"))


async def test_the_index_rebuilt_from_the_journal_is_the_one_fed_as_it_was_read(tmp_path: Path) -> None:
    first = _thought("slack:T/C/1", "what broke?")
    entries: list[BaseEntry] = [
        first,
        StatusEntry(conversation=first.conversation, state="turn_started"),
        DeltaEntry(conversation=first.conversation, text="the ca"),
        _reply(first, "the cache"),
        _thought("slack:T/C/2", "and now?", minute=5),
        _thought("other:x", "not ours", who=None),
    ]
    journal = FileJournal(tmp_path / "journal.jsonl", durability="never")
    fed = ChatIndex()
    try:
        for entry in entries:
            record = await journal.append(entry)
            fed.add(record.entry, mapped=record.entry.conversation.startswith("slack:"))
        rebuilt = ChatIndex()
        await rebuilt.rebuild(journal, await journal.end_position(), lambda name: name.startswith("slack:"))
    finally:
        await journal.aclose()
    assert rebuilt.listed("slack:U1") == fed.listed("slack:U1") and len(fed.listed("slack:U1")) == 2
    assert rebuilt.history("slack:T/C/1", 5) == fed.history("slack:T/C/1", 5)
    assert fed.history("slack:T/C/1", 5)[0].reply == "the cache" and "other:x" not in rebuilt.conversations


async def test_entries_read_during_the_rebuild_are_taken_in_after_it_in_order(tmp_path: Path) -> None:
    first = _thought("c", "earlier question")
    journal = FileJournal(tmp_path / "journal.jsonl", durability="never")
    try:
        await journal.append(first)
        end = await journal.end_position()
        index = ChatIndex()
        index.begin_rebuild()
        assert index.phase is IndexPhase.REBUILDING and not index.done.is_set()
        later = _thought("c", "later question", minute=1)
        index.add(later, mapped=True)  # read by the tail while the rebuild runs
        index.add(_reply(later, "later answer", minute=2), mapped=True)
        assert index.history("c", 5) == []  # kept aside until the rebuild is over
        await index.rebuild(journal, end, lambda name: True)
    finally:
        await journal.aclose()
    assert index.phase is IndexPhase.READY and await settled(index) == ""
    assert [(e.thought, e.reply) for e in index.history("c", 5)] == [
        ("earlier question", None),
        ("later question", "later answer"),
    ]


async def test_a_journal_that_cannot_be_read_leaves_the_index_partial_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = FileJournal(path, durability="never")
    try:
        await journal.append(_thought("c", "earlier question"))
        end = await journal.end_position()
        path.unlink()
        path.mkdir()  # the journal's path is no readable file any more
        index = ChatIndex()
        index.begin_rebuild()
        index.add(_thought("c", "later question"), mapped=True)
        await index.rebuild(journal, end, lambda name: True)
    finally:
        await journal.aclose()
    assert index.phase is IndexPhase.PARTIAL and [e.thought for e in index.history("c", 5)] == ["later question"]
    assert (await settled(index)).startswith("(the journal's earlier entries could not be read")
