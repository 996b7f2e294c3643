import io

from coven_codex.chat.stream_view import StreamView


def _view() -> tuple[StreamView, io.StringIO]:
    out = io.StringIO()
    return StreamView(out, "codex: "), out


def test_deltas_then_response_complete_the_line() -> None:
    view, out = _view()
    view.delta("m1", "Hel")
    view.delta("m1", "lo")
    assert view.response("Hello there") is True
    assert out.getvalue() == "codex: Hello there\n"


def test_response_then_late_deltas_are_not_repeated() -> None:
    view, out = _view()
    assert view.response("Hello there") is False  # the caller prints it whole
    view.delta("m1", "Hello")
    view.delta("m1", " there")
    assert out.getvalue() == ""


def test_interrupted_stream_stops_and_the_response_is_printed_whole() -> None:
    view, out = _view()
    view.delta("m1", "Hel")
    view.interrupt()
    view.delta("m1", "lo")
    assert out.getvalue() == "codex: Hel\n"
    assert view.response("Hello") is False


def test_a_second_item_interrupts_the_first() -> None:
    view, out = _view()
    view.delta("m1", "one")
    view.delta("m2", "two")
    assert out.getvalue() == "codex: one\ncodex: two"
    assert view.response("two!") is True
    assert out.getvalue().endswith("codex: two!\n")


def test_diverging_response_ends_the_line_and_asks_for_a_full_print() -> None:
    view, out = _view()
    view.delta(None, "draft")
    assert view.response("final text") is False
    assert out.getvalue() == "codex: draft\n"
