"""``activity`` entries (plans, web searches, compactions, user shell commands…) render compactly."""

from __future__ import annotations

from coven_codex.adapters.kit.render import AnsiDialect, PlainDialect, format_block, render_entry
from coven_codex.entries import ActivityEntry, GenericEntry, parse_entry


def _plain(entry: ActivityEntry) -> list[str]:
    block = render_entry(entry)
    assert block is not None
    return format_block(block, PlainDialect())


def test_each_activity_has_a_compact_form() -> None:
    assert _plain(ActivityEntry(activity="web_search", text="searched for 'coven'")) == [
        "[web search] searched for 'coven'"
    ]
    assert _plain(ActivityEntry(activity="compaction", text="the conversation history was compacted")) == [
        "[compacted] the conversation history was compacted"
    ]
    assert _plain(ActivityEntry(activity="user_shell", text="!ls\na.txt")) == ["[shell] !ls\na.txt"]
    assert _plain(ActivityEntry(activity="plan", text="1. read\n2. write")) == ["plan: 1. read\n2. write"]
    assert _plain(ActivityEntry(activity="review", text="patch is incorrect: 1 finding (bug)")) == [
        "[review] patch is incorrect: 1 finding (bug)"
    ]
    assert _plain(ActivityEntry(activity="something_new", text="x")) == ["[something new] x"]
    long = _plain(ActivityEntry(activity="patch", text="y" * 1000))[0]
    assert len(long) < 420 and long.endswith("…")
    assert format_block(render_entry(ActivityEntry(activity="image", text="")), AnsiDialect())[0].endswith(  # type: ignore[arg-type]
        "[image]\x1b[0m"
    )


def test_activity_is_a_known_kind_that_round_trips() -> None:
    entry = parse_entry({"kind": "activity", "activity": "web_search", "text": "t", "url": "https://x"})
    assert isinstance(entry, ActivityEntry) and not isinstance(entry, GenericEntry)
    assert entry.sender == "codex" and entry.model_dump()["url"] == "https://x"
    assert parse_entry(entry.model_dump(mode="json")).model_dump() == entry.model_dump()
