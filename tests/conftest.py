"""Shared fixtures: where the pinned Codex CLIs are, and process-leak checks."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from suite_order import DURATIONS, UNMEASURED_SECONDS, deal, merge_durations, read_durations

from coven_codex.daemon.watchdog import WATCHDOG_RECORD_PREFIX
from coven_codex.testing.redis_server import RedisServer

ROOT = Path(__file__).resolve().parent.parent
CODEX_VERSIONS = ("0.169.0", "0.47.0")


def codex_binary(version: str) -> Path:
    """Path of the pinned Codex CLI ``version``; installs it (npm) if it is missing."""
    path = ROOT / ".codex-cli" / version / "node_modules" / ".bin" / "codex"
    if not path.exists():
        subprocess.run([str(ROOT / "scripts" / "install-codex.sh"), version], check=True, stdout=subprocess.DEVNULL)
    return path


def _expected_seconds(item: pytest.Item, measured: dict[str, float]) -> float:
    """The seconds ``item`` took when measured (:data:`suite_order.DURATIONS`), else a guess by its markers."""
    if item.nodeid in measured:
        return measured[item.nodeid]
    for marker in ("slow", "codex"):
        if item.get_closest_marker(marker) is not None:
            return UNMEASURED_SECONDS[marker]
    return UNMEASURED_SECONDS["other"]


@pytest.hookimpl(trylast=True)  # after ``-m`` and ``-k`` deselected what they do: the chunks are of what runs
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Long tests first, spread over the pytest-xdist workers (:func:`suite_order.deal`; ``scripts/test.sh``):
    each worker starts with its share of them, and the last minutes are spent on short tests that fill every
    worker, not on long tests that started late or queued behind each other on one worker."""
    measured = read_durations(DURATIONS)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    items[:] = deal(items, lambda item: _expected_seconds(item, measured), workers)


_recorded: dict[str, float] = {}
_failed: set[str] = set()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """With ``COVEN_TEST_DURATIONS`` set, add up each test's seconds (in the process that reports them all:
    pytest-xdist's controller, or the only one)."""
    if os.environ.get("COVEN_TEST_DURATIONS") and "PYTEST_XDIST_WORKER" not in os.environ:
        _recorded[report.nodeid] = _recorded.get(report.nodeid, 0.0) + report.duration
        if report.failed:
            _failed.add(report.nodeid)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """With ``COVEN_TEST_DURATIONS=FILE`` (e.g. ``tests/durations.txt``), merge this run's durations into FILE;
    a test that failed keeps its time from before (a failure's time, e.g. a timeout's, is not its length)."""
    target = os.environ.get("COVEN_TEST_DURATIONS")
    passed = {nodeid: seconds for nodeid, seconds in _recorded.items() if nodeid not in _failed}
    if target and "PYTEST_XDIST_WORKER" not in os.environ and passed:
        merge_durations(Path(target), passed)


@pytest.fixture(params=CODEX_VERSIONS, ids=lambda v: f"codex-{v}")
def codex_version(request: pytest.FixtureRequest) -> str:
    """Parametrises a test over every supported Codex CLI version."""
    return str(request.param)


@pytest.fixture
def codex_bin(codex_version: str) -> Path:
    return codex_binary(codex_version)


@pytest.fixture
def codex_of() -> Callable[[str], Path]:
    """``codex_of(version)``: the path of that Codex CLI, installed (npm) on first use."""
    return codex_binary


@pytest.fixture
def codex_bin_169() -> Path:
    return codex_binary("0.169.0")


@pytest.fixture
def codex_bin_047() -> Path:
    return codex_binary("0.47.0")


@pytest.fixture(autouse=True)
def _private_state_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Default state directories (``$XDG_STATE_HOME/coven-codex/...``) go to a temp dir, never to the
    real ``~/.local/state``; child processes inherit the variable."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("xdg-state")))


@pytest.fixture(autouse=True)
def _private_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """``HOME`` is an empty temp dir (a test that needs its own sets it after this), so the shell
    snapshot Codex takes (``bash -lc``) sources none of the developer's dotfiles. The real
    ``~/.bashrc`` here runs ``pyenv rehash``, which holds a lock file while it works: the crash
    tests kill Codex trees mid-snapshot, the lock stayed behind, and every later shell waited
    60 s on it (orphaned ``pyenv-rehash`` loops, and a broken pyenv for the developer)."""
    monkeypatch.setenv("HOME", str(tmp_path_factory.mktemp("home")))


@pytest.fixture(autouse=True)
def _no_leaked_processes() -> object:
    """Every test must end every process it started (checked with psutil)."""
    import psutil

    me = psutil.Process(os.getpid())
    before = {p.pid for p in me.children(recursive=True)}
    yield
    leaked = []
    for proc in me.children(recursive=True):
        if proc.pid in before:
            continue
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                leaked.append(f"{proc.pid} {' '.join(proc.cmdline())[:120]}")
        except psutil.NoSuchProcess:
            continue
    assert not leaked, f"processes left running by this test: {leaked}"


@pytest.fixture(autouse=True)
def _shutdown_watchdog_never_fires(request: pytest.FixtureRequest, _private_state_home: None) -> Iterator[None]:
    """A daemon's shutdown watchdog firing is a bug (a shutdown overran its bound: a blocked event
    loop or an unbounded wait), never a hang to hide: the test fails when a state directory it
    used (``$XDG_STATE_HOME``, or one under its ``tmp_path``) holds the watchdog's record
    (:mod:`coven_codex.daemon.watchdog`), and shows the stacks it kept."""
    roots = [Path(os.environ["XDG_STATE_HOME"])]
    if "tmp_path" in request.fixturenames:  # (asked for now: torn down after this check)
        roots.append(request.getfixturevalue("tmp_path"))
    yield
    records = sorted({path for root in roots if root.is_dir() for path in root.rglob(f"{WATCHDOG_RECORD_PREFIX}*")})
    if records:
        kept = records[0].read_text(errors="replace")[-6000:]
        pytest.fail(f"the shutdown watchdog fired: {[str(r) for r in records]}\n{kept}", pytrace=False)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A real ``redis-server`` (AOF on) on a free loopback port, shared by the session: give each
    test a key of its own. Tests that stop or kill Redis start their own :class:`RedisServer`."""
    with RedisServer(tmp_path_factory.mktemp("redis")) as server:
        yield server
