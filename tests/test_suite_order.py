"""The suite's order on pytest-xdist workers (``tests/suite_order.py``): every worker starts on long tests."""

from __future__ import annotations

from pathlib import Path

from suite_order import deal, merge_durations, read_durations, xdist_chunk_sizes

# what the last run before the dealing measured: the longest tests, then many short ones
LONG = {"mcp-serve": 95.0, "failover": 80.0, "crash-047": 78.0, "bad-day": 55.0, "crash": 53.0, "segments": 53.0}
SHORT = {f"short-{n}": 0.5 for n in range(400)}
SECONDS = {**LONG, **SHORT}


def test_xdist_hands_out_contiguous_chunks_of_these_sizes() -> None:
    assert xdist_chunk_sizes(1686, 4) == [421, 421, 422, 422]
    assert xdist_chunk_sizes(3, 4) == [0, 1, 1, 1]
    assert sum(xdist_chunk_sizes(1001, 6)) == 1001


def test_every_worker_starts_on_long_tests_and_the_expected_work_is_balanced() -> None:
    names = sorted(SECONDS)  # the collection's order: nothing long first
    dealt = deal(names, SECONDS.__getitem__, 4)
    assert sorted(dealt) == names
    chunks, start = [], 0
    for size in xdist_chunk_sizes(len(dealt), 4):
        chunks.append(dealt[start : start + size])
        start += size
    # the four longest tests head the four chunks: none waits behind another long one
    assert sorted(chunk[0] for chunk in chunks) == sorted(sorted(LONG, key=LONG.__getitem__)[-4:])
    for chunk in chunks:
        assert [SECONDS[name] for name in chunk] == sorted((SECONDS[name] for name in chunk), reverse=True)
    loads = [sum(SECONDS[name] for name in chunk) for chunk in chunks]
    assert max(loads) - min(loads) <= max(SECONDS.values())


def test_without_workers_the_longest_run_first() -> None:
    assert deal(["a", "b", "c"], {"a": 1.0, "b": 3.0, "c": 2.0}.__getitem__, 1) == ["b", "c", "a"]


def test_recorded_durations_merge_into_the_file(tmp_path: Path) -> None:
    path = tmp_path / "durations.txt"
    merge_durations(path, {"tests/a.py::test_x[one two]": 12.25, "tests/b.py::test_y": 0.2})
    merge_durations(path, {"tests/c.py::test_z": 3.0})
    assert path.read_text() == "12.2 tests/a.py::test_x[one two]\n3.0 tests/c.py::test_z\n"
    assert read_durations(path) == {"tests/a.py::test_x[one two]": 12.2, "tests/c.py::test_z": 3.0}
