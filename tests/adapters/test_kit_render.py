"""Rendering entries into blocks and dialects."""

from __future__ import annotations

from coven_codex.adapters.kit.render import (
    AnsiDialect,
    HtmlDialect,
    PlainDialect,
    RenderOptions,
    format_arguments,
    format_block,
    render_entry,
)
from coven_codex.entries import (
    ApprovalRequestEntry,
    DeltaEntry,
    ErrorEntry,
    ReasoningEntry,
    ResponseEntry,
    StatusEntry,
    ThoughtEntry,
    ToolCallEntry,
    ToolResultEntry,
)


def _plain(entry: object, options: RenderOptions = RenderOptions()) -> list[str]:  # noqa: B008
    block = render_entry(entry, options)  # type: ignore[arg-type]
    return [] if block is None else format_block(block, PlainDialect())


def test_tool_calls_and_results_are_compact_and_errors_marked() -> None:
    assert _plain(ToolCallEntry(tool="coven.add", arguments={"a": 2, "b": 3})) == ["→ coven.add(a=2, b=3)"]
    assert _plain(ToolCallEntry(tool="shell", arguments='{"cmd": "ls"}')) == ['→ shell(cmd="ls")']
    assert _plain(ToolResultEntry(text="5", tool="coven.add")) == ["← 5"]
    assert _plain(ToolResultEntry(text="division by zero", tool="coven.div", is_error=True)) == [
        "✗ coven.div: division by zero"
    ]
    assert format_arguments("not json") == "not json"
    long = _plain(ToolResultEntry(text="x" * 1000))[0]
    assert len(long) < 410 and long.endswith("…")


def test_a_failed_turn_does_not_repeat_its_state() -> None:
    status = StatusEntry(state="turn_failed", text="turn failed: RATE_LIMIT")
    assert _plain(status) == ["[turn failed: RATE_LIMIT]"]
    assert _plain(StatusEntry(state="turn_aborted", text="Turn aborted")) == ["[turn aborted]"]


def test_quiet_statuses_reasoning_and_thoughts_follow_the_options() -> None:
    assert _plain(StatusEntry(state="turn_started")) == []
    assert _plain(StatusEntry(state="turn_started"), RenderOptions(show_status=True)) == ["[turn started]"]
    assert _plain(ReasoningEntry(text="hmm"), RenderOptions(show_reasoning=False)) == []
    assert _plain(ReasoningEntry(text="hmm")) == ["(thinking) hmm"]
    assert _plain(ThoughtEntry(text="hi", sender="ann")) == []
    assert _plain(ThoughtEntry(text="hi", sender="ann"), RenderOptions(show_thoughts=True)) == ["ann> hi"]
    assert _plain(DeltaEntry(text="x")) == []


def test_errors_carry_their_hint_and_approvals_their_buttons() -> None:
    assert _plain(ErrorEntry(code="AUTH", text="401", hint="run codex login")) == [
        "error AUTH: 401\nhint: run codex login"
    ]
    block = render_entry(ApprovalRequestEntry(request_id="r1", action="run ls"))
    assert block is not None
    assert [(a.label, a.command) for a in block.actions] == [
        ("Approve", "approve r1"),
        ("Approve for session", "approve-session r1"),
        ("Deny", "deny r1"),
    ]


def test_html_escapes_everything_and_keeps_markdown() -> None:
    html = HtmlDialect()
    text = format_block(
        render_entry(ResponseEntry(text="**bold** <script>alert(1)</script> [x](javascript:alert(1))")), html
    )[0]  # type: ignore[arg-type]
    assert "<strong>bold</strong>" in text and "<script>" not in text and "&lt;script&gt;" in text
    assert 'href="javascript' not in text
    reasoning = format_block(render_entry(ReasoningEntry(text="a <b>")), html)[0]  # type: ignore[arg-type]
    assert reasoning.startswith("<details><summary>thinking</summary>") and "<b>" not in reasoning
    tool = format_block(render_entry(ToolCallEntry(tool="<img>", arguments=None)), html)[0]  # type: ignore[arg-type]
    assert "<img>" not in tool and "&lt;img&gt;" in tool


def test_ansi_colours_and_the_limit_splits() -> None:
    coloured = format_block(render_entry(ToolCallEntry(tool="t")), AnsiDialect())[0]  # type: ignore[arg-type]
    assert coloured.startswith("\x1b[33m") and coloured.endswith("\x1b[0m")
    parts = format_block(render_entry(ResponseEntry(text="word " * 100)), PlainDialect(limit=100))  # type: ignore[arg-type]
    assert len(parts) > 1 and all(len(p) <= 100 for p in parts) and parts[0].startswith("codex: ")
    assert "".join(p.removeprefix("codex: ") for p in parts) == "word " * 100
