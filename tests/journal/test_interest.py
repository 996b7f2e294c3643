"""Reading with an interest: lines that cannot hold one of its words are passed over undecoded,
and no line that may hold one is ever passed over (``coven_codex/journal/interest.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coven_codex.agent.ingress import STARTUP_INTEREST
from coven_codex.entries import KNOWN_KINDS, GenericEntry, ResponseEntry, ThoughtEntry
from coven_codex.journal import BadLine, FileJournal, Interest, JournalRecord, Position
from coven_codex.journal.decoding import decode_line
from coven_codex.journal.reader import READ_CHUNK, SegmentReader
from coven_codex.journal.segments import SegmentLayout

WORDS = STARTUP_INTEREST.words


def escaped(word: str, which: set[int]) -> str:
    """``word`` as a JSON string body with the characters at ``which`` written as ``\\u`` escapes."""
    return "".join(f"\\u{ord(c):04x}" if i in which else c for i, c in enumerate(word))


@st.composite
def lines(draw: st.DrawFn) -> tuple[bytes, dict[str, Any]]:
    """A journal line as any program might write it, and the value it decodes to."""
    kind = draw(st.sampled_from(sorted(KNOWN_KINDS | {"message", "note", "Thought", "thoughts"})))
    sender = draw(st.sampled_from(["codex", "web", "Codex", "slack:U1", "codexbot"]))
    value = {
        "id": draw(st.text(max_size=8)),
        "kind": kind,
        "sender": sender,
        "text": draw(st.text(max_size=40)),
        "conversation": draw(st.text(max_size=8)),
    }
    keys = draw(st.permutations(list(value)))
    separators = draw(st.sampled_from([(",", ":"), (", ", ": "), (",", " : ")]))
    line = json.dumps({k: value[k] for k in keys}, ensure_ascii=draw(st.booleans()), separators=separators)
    for field in ("kind", "sender"):
        which = draw(st.sets(st.integers(0, len(value[field]) - 1), max_size=3))
        if which:  # spell some of its characters as escapes, as a program may
            plain = json.dumps(value[field])
            line = line.replace(f"{separators[1]}{plain}", f'{separators[1]}"{escaped(value[field], which)}"', 1)
    assert json.loads(line) == value
    return line.encode(), value


@settings(max_examples=400, deadline=None)
@given(lines())
def test_no_line_holding_a_word_as_its_kind_or_sender_is_passed_over(case: tuple[bytes, dict[str, Any]]) -> None:
    line, value = case
    if value["kind"] in WORDS or value["sender"] in WORDS:
        assert STARTUP_INTEREST.admits(line)
        assert STARTUP_INTEREST.line_starts(line + b"\n", len(line) + 1) == [0]


def test_other_traffic_is_passed_over() -> None:
    message = GenericEntry(kind="message", conversation="room", sender="slack:U1", text="I thought so").to_json()
    answer = ResponseEntry(conversation="room", sender="other-bot", text="a reset and a cancel").to_json()
    approval = '{"kind":"approval","request_id":"r","decision":"approve"}'
    for line in (message, answer, approval):
        assert not STARTUP_INTEREST.admits(line.encode()), line
    chunk = "".join(f"{line}\n" for line in (message, answer, approval)).encode()
    assert STARTUP_INTEREST.line_starts(chunk, len(chunk)) == []


def test_an_interest_takes_only_words_json_never_escapes_otherwise() -> None:
    with pytest.raises(ValueError, match="ASCII letters"):
        Interest(frozenset({"a-b"}))
    with pytest.raises(ValueError, match="at least one"):
        Interest(frozenset())


async def test_a_read_with_an_interest_gives_exactly_the_admitted_items_where_a_full_read_does(
    tmp_path: Path,
) -> None:
    """Across reads of :data:`READ_CHUNK` bytes, with lines cut by a chunk's end, lines longer than
    a chunk, bad lines and a partial last line."""
    path = tmp_path / "journal.jsonl"
    other = GenericEntry(kind="message", conversation="room", sender="slack", text="x" * 200).to_json().encode()
    thought = ThoughtEntry(conversation="c", text="y" * 100).to_json().encode()
    long_thought = ThoughtEntry(conversation="c", text="z" * (READ_CHUNK + 5000)).to_json().encode()
    long_other = GenericEntry(kind="message", text="w" * (2 * READ_CHUNK)).to_json().encode()
    bad = b'{"kind": "thought", "text": '  # torn, and admitted: reported
    ours = ResponseEntry(conversation="c", text="answer").to_json().encode()
    body = []
    for n in range(40_000):
        body.append(other)
        if n % 997 == 0:
            body.append(thought.replace(b'"id":null', b'"id":"t%d"' % n))
        if n % 4999 == 0:
            body.append(ours.replace(b'"id":null', b'"id":"o%d"' % n))
        if n in {5000, 22222}:
            body.extend([long_thought, long_other, bad])
    path.write_bytes(b"\n".join(body) + b"\n" + thought[:50])  # ... and a partial last line
    assert path.stat().st_size > 8 * READ_CHUNK
    journal = FileJournal(path, durability="never")
    try:
        everything = await journal.read()
        admitted = await journal.read(interest=STARTUP_INTEREST)
        middle = everything[len(everything) // 2].start
        admitted_after = await journal.read(middle, interest=STARTUP_INTEREST)
    finally:
        await journal.aclose()
    data = path.read_bytes()
    expected = [item for item in everything if STARTUP_INTEREST.admits(data[item.start.minor : item.end.minor - 1])]
    assert admitted == expected
    assert admitted_after == [item for item in expected if item.start >= middle]
    kinds = {type(item) for item in admitted}
    assert kinds == {JournalRecord, BadLine}
    assert sum(isinstance(i, JournalRecord) and i.entry.kind == "thought" for i in admitted) == 41 + 2
    assert len(admitted) < len(everything) // 100


def test_the_reader_of_a_segment_never_passes_over_what_it_admits(tmp_path: Path) -> None:
    """A line of interest right at a chunk's boundary is found, whichever side it is cut on."""
    path = tmp_path / "journal.jsonl"
    filler = GenericEntry(kind="message", text="f" * 100).to_json().encode() + b"\n"
    thought = ThoughtEntry(id="edge", conversation="c", text="t").to_json().encode() + b"\n"
    for shift in (-len(thought) - 1, -len(thought), -10, -1, 0, 1):
        head = filler * ((READ_CHUNK + shift) // len(filler))
        head += (
            b"{" + b" " * (READ_CHUNK + shift - len(head) - 3) + b"}\n" if READ_CHUNK + shift - len(head) >= 3 else b""
        )
        path.write_bytes(head + thought + filler * 10)

        reader = SegmentReader(
            SegmentLayout(path),
            Position(0, 0),
            max_line_bytes=1 << 24,
            on_notice=None,
            follow=False,
            interest=STARTUP_INTEREST,
        )
        try:
            items = [item for batch in reader.catch_up() for item in batch]
        finally:
            reader.close()
        records = [i for i in items if isinstance(i, JournalRecord)]
        assert [r.entry.id for r in records] == ["edge"], shift
        assert records[0].start == Position(0, len(head))
        assert reader.position == Position(0, path.stat().st_size)
        assert decode_line(thought[:-1], records[0].start, records[0].end, max_line_bytes=1 << 24) == records[0]
