"""Splitting long messages: nothing lost, nothing repeated, fences closed and reopened, limits kept."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coven_codex.adapters.kit.split import split_message

FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")

text_line = st.text(alphabet="ab  .\t#*-é😀", min_size=0, max_size=90)
fence_line = st.sampled_from(["```", "```python", "~~~", "````", "``` js", "  ```"])
lines = st.lists(st.one_of(text_line, text_line, text_line, fence_line), max_size=40)


def _fence_lines(text: str) -> int:
    return sum(1 for line in text.split("\n") if FENCE.match(line))


@settings(max_examples=400, deadline=None)
@given(lines=lines, limit=st.integers(min_value=24, max_value=400), trailing=st.booleans())
def test_split_loses_and_repeats_nothing_and_keeps_the_limit(lines: list[str], limit: int, trailing: bool) -> None:
    text = "\n".join(lines) + ("\n" if trailing else "")
    parts = split_message(text, limit)
    assert "".join(part.body for part in parts) == text
    assert all(len(part.text) <= limit for part in parts)
    assert all(part.body for part in parts) or parts == [parts[0]]
    for part in parts:
        assert part.prefix == "" or FENCE.match(part.prefix)
        assert part.suffix == "" or FENCE.fullmatch(part.suffix.lstrip("\n"))


@settings(max_examples=300, deadline=None)
@given(
    code=st.lists(st.text(alphabet="xyz =(){}", max_size=60), min_size=1, max_size=60),
    limit=st.integers(min_value=30, max_value=200),
)
def test_a_code_block_cut_in_parts_is_code_in_every_part(code: list[str], limit: int) -> None:
    text = "before\n\n```python\n" + "\n".join(code) + "\n```\nafter"
    parts = split_message(text, limit)
    for part in parts:
        assert _fence_lines(part.text) % 2 == 0, part
    inside = [part for part in parts if "```python" not in part.body and part.prefix]
    assert all(part.prefix == "```python\n" for part in inside)


def test_prefers_paragraphs_then_lines() -> None:
    text = "first paragraph line one\nline two\n\nsecond paragraph here\nmore"
    parts = split_message(text, 40)
    assert parts[0].body == "first paragraph line one\nline two\n\n"
    assert split_message("aaaa bbbb cccc dddd eeee ffff gggg hhhh", 20)[0].body == "aaaa bbbb cccc dddd "


def test_a_short_text_is_one_part_and_a_tiny_limit_is_refused() -> None:
    assert [p.text for p in split_message("hello", 2000)] == ["hello"]
    assert [p.text for p in split_message("", 2000)] == [""]
    with pytest.raises(ValueError, match="too small"):
        split_message("some text here", 4)
    long_fence = "`" * 30 + "\n" + "code " * 20 + "\n" + "`" * 30
    parts = split_message(long_fence, 24)
    assert "".join(p.body for p in parts) == long_fence and all(len(p.text) <= 24 for p in parts)
