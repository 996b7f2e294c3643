"""The instruments' bookkeeping: bounded labels, one first reply per thought, bounded memory."""

from __future__ import annotations

from typing import get_type_hints

from prometheus_client import Counter, Gauge, Histogram

from coven_codex.entries import DeltaEntry, ErrorEntry, ResponseEntry, StatusEntry
from coven_codex.metrics.instruments import FAMILIES, MAX_ERROR_CODES, MAX_TRACKED_THOUGHTS, Instruments


def sample(metrics: Instruments, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def test_turn_ends_are_counted_by_their_state_and_unknown_ones_as_other() -> None:
    metrics = Instruments()
    for state in ("turn_started", "turn_completed", "turn_failed", "turn_aborted", "turn_sideways", "session_ended"):
        metrics.entry_appended(StatusEntry(state=state, conversation="c"))
    assert sample(metrics, "coven_turns_started_total") == 1
    for status in ("turn_completed", "turn_failed", "turn_aborted", "other"):
        assert sample(metrics, "coven_turns_ended_total", status=status) == 1


def test_error_codes_are_a_bounded_label() -> None:
    metrics = Instruments()
    metrics.entry_appended(ErrorEntry(code="not a code", conversation="c"))
    for number in range(MAX_ERROR_CODES + 5):
        metrics.entry_appended(ErrorEntry(code=f"CODE_{number}", conversation="c"))
    codes = {s.labels["code"] for family in metrics.registry.collect() for s in family.samples if "code" in s.labels}
    assert len(codes) == MAX_ERROR_CODES + 1  # the first 64 codes, and OTHER
    assert sample(metrics, "coven_errors_total", code="OTHER") == 6


def test_a_thoughts_first_reply_is_observed_once_and_its_clock_forgotten_at_the_turns_end() -> None:
    metrics = Instruments()
    metrics.thought_received("t1")
    metrics.entry_appended(StatusEntry(state="turn_started", in_reply_to="t1"))
    metrics.entry_appended(DeltaEntry(item_id="i", text="he", in_reply_to="t1"))
    metrics.entry_appended(ResponseEntry(text="hello", in_reply_to="t1"))
    metrics.entry_appended(StatusEntry(state="turn_completed", in_reply_to="t1"))
    metrics.entry_appended(ResponseEntry(text="late", in_reply_to="t1"))
    assert sample(metrics, "coven_thought_to_turn_started_seconds_count") == 1
    assert sample(metrics, "coven_thought_to_first_reply_seconds_count") == 1
    assert sample(metrics, "coven_replies_total") == 2
    assert not metrics._arrived and not metrics._replied


def test_thoughts_that_never_start_a_turn_are_forgotten_beyond_the_bound() -> None:
    metrics = Instruments()
    for number in range(MAX_TRACKED_THOUGHTS + 100):
        metrics.thought_received(f"t{number}")
    assert len(metrics._arrived) == MAX_TRACKED_THOUGHTS
    assert "t0" not in metrics._arrived and f"t{MAX_TRACKED_THOUGHTS + 99}" in metrics._arrived


def test_leases_moved_are_counted_by_direction() -> None:
    metrics = Instruments()
    metrics.lease_moved("in")
    metrics.lease_moved("in")
    metrics.lease_moved("out")
    assert sample(metrics, "coven_leases_moved_total", direction="in") == 2
    assert sample(metrics, "coven_leases_moved_total", direction="out") == 1


def test_the_families_table_makes_every_attribute_of_its_declared_kind() -> None:
    metrics = Instruments()
    kinds = {"counter": Counter, "gauge": Gauge, "histogram": Histogram}
    declared = {name: kind for name, kind in get_type_hints(Instruments).items() if kind in kinds.values()}
    assert declared == {family.attribute: kinds[family.kind] for family in FAMILIES}
    assert len({family.name for family in FAMILIES}) == len(FAMILIES)
    for family in FAMILIES:
        metric = getattr(metrics, family.attribute)
        assert isinstance(metric, kinds[family.kind])
        assert (metric._name, metric._documentation, metric._labelnames) == (
            f"coven_{family.name}",
            family.help,
            family.labels,
        )
