"""LineSplitter: complete lines out of arbitrarily split chunks."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from coven_codex.tailing import Line, LineSplitter


def expected_lines(data: bytes, limit: int, base: int = 0) -> list[Line]:
    lines = []
    start = base
    for piece in data.split(b"\n")[:-1]:
        end = start + len(piece) + 1
        lines.append(Line(b"", start, end, True) if len(piece) > limit else Line(piece, start, end))
        start = end
    return lines


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


def test_every_single_byte_boundary() -> None:
    data = b'alpha\nbeta gamma\n\n{"k": "\xc3\xa9"}\nunterminated'
    for cut in range(len(data) + 1):
        splitter = LineSplitter()
        lines = splitter.feed(data[:cut]) + splitter.feed(data[cut:])
        assert lines == expected_lines(data, 10**6), cut
        assert splitter.consumed == data.rfind(b"\n") + 1
        assert splitter.pending_bytes == len(b"unterminated")


def test_partial_line_waits_for_its_newline() -> None:
    splitter = LineSplitter(100)
    assert splitter.feed(b"hel") == []
    assert splitter.feed(b"lo") == []
    assert splitter.feed(b"\nwor") == [Line(b"hello", 100, 106)]
    assert splitter.consumed == 106
    assert splitter.offset == 109


def test_too_long_line_is_skipped_not_buffered() -> None:
    splitter = LineSplitter(max_line_bytes=4)
    assert splitter.feed(b"ok\n12345") == [Line(b"ok", 0, 3)]
    assert splitter.pending_bytes == 5
    assert splitter.feed(b"6" * 10_000) == []
    assert len(splitter._partial) == 0  # nothing of the long line is kept
    assert splitter.feed(b"78\nfine\n") == [Line(b"", 3, 10_011, too_long=True), Line(b"fine", 10_011, 10_016)]


def test_exact_limit_is_allowed() -> None:
    splitter = LineSplitter(max_line_bytes=4)
    assert splitter.feed(b"1234\n12345\n") == [Line(b"1234", 0, 5), Line(b"", 5, 11, too_long=True)]


def test_reset_forgets_partial_line() -> None:
    splitter = LineSplitter()
    splitter.feed(b"abc\npartial")
    splitter.reset(0)
    assert splitter.pending_bytes == 0
    assert splitter.feed(b"new\n") == [Line(b"new", 0, 4)]


@given(
    st.lists(st.binary(max_size=12).filter(lambda b: b"\n" not in b), max_size=30),
    st.binary(max_size=6).filter(lambda b: b"\n" not in b),
    st.lists(st.integers(min_value=0, max_value=500), max_size=40),
    st.integers(min_value=1, max_value=10),
    st.integers(min_value=0, max_value=10**9),
)
def test_any_split_gives_the_same_lines(
    pieces: list[bytes], tail: bytes, cuts: list[int], limit: int, base: int
) -> None:
    data = b"".join(p + b"\n" for p in pieces) + tail
    splitter = LineSplitter(base, max_line_bytes=limit)
    lines: list[Line] = []
    for chunk in split_at(data, cuts):
        lines += splitter.feed(chunk)
    assert lines == expected_lines(data, limit, base)
    assert splitter.offset == base + len(data)
    assert splitter.consumed == base + len(data) - len(tail)
