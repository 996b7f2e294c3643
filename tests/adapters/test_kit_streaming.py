"""Coalescing deltas into streams: which stream a reply completes, late echoes, the cursor hold."""

from __future__ import annotations

from coven_codex.adapters.kit.streaming import Streams


def test_deltas_grow_one_stream_that_the_response_completes() -> None:
    streams = Streams()
    first = streams.delta("c", "m1", "e1", 10, "Hel")
    assert first is not None and streams.delta("c", "m1", "e2", 20, "lo") is first
    assert first.text == "Hello" and streams.hold() == 10
    assert streams.response("c", "Hello there") is first
    assert streams.hold() is None and not streams.open
    assert streams.delta("c", "m1", "e3", 30, " more") is None  # that item is done


def test_late_deltas_of_a_reply_already_shown_are_held_back_then_dropped() -> None:
    streams = Streams()
    assert streams.response("c", "Hello there") is None
    stream = streams.delta("c", "m1", "e1", 10, "Hello")
    assert stream is not None and streams.echo(stream) == "maybe"  # not shown yet
    assert streams.delta("c", "m1", "e2", 20, " there") is stream
    assert streams.echo(stream) == "whole"
    assert streams.hold() is None and streams.delta("c", "m1", "e3", 30, "!") is None


def test_a_reply_that_starts_like_an_earlier_one_is_shown_once_it_differs() -> None:
    streams = Streams()
    streams.response("c", "streamed reply 095. xxx")
    stream = streams.delta("c", "m2", "e1", 10, "streame")
    assert stream is not None and streams.echo(stream) == "maybe"
    streams.delta("c", "m2", "e2", 20, "d reply 102.")
    assert streams.echo(stream) == "no" and streams.hold() == 10


def test_a_response_completes_the_stream_it_starts_with_else_the_oldest() -> None:
    streams = Streams()
    one = streams.delta("c", "m1", "e1", 10, "one")
    two = streams.delta("c", "m2", "e2", 20, "two")
    other = streams.delta("d", "m3", "e3", 30, "two")
    assert streams.response("c", "two!") is two
    assert streams.response("c", "something else") is one
    assert streams.open == [other] and streams.hold() == 30


def test_a_turn_end_closes_its_conversation_s_streams_only() -> None:
    streams = Streams()
    mine = streams.delta("c", None, "e1", 10, "draft")
    theirs = streams.delta("d", None, "e2", 20, "other")
    assert streams.end_turn("c") == [mine]
    assert streams.open == [theirs]
    again = streams.delta("c", None, "e3", 30, "new reply")  # deltas without item ids start anew
    assert again is not None and again is not mine


def test_waits_keep_the_edit_rate() -> None:
    streams = Streams()
    stream = streams.delta("c", "m1", "e1", 0, "x")
    assert stream is not None
    stream.last_edit = 100.0
    assert abs(stream.wait(100.4, 1.0) - 0.6) < 1e-9
    assert stream.wait(101.5, 1.0) == 0.0
