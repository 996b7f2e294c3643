"""The lifecycles of drivers, app-server connections and pools: every allowed move is taken, any
other refused with the phase kept; the real objects move through them."""

from __future__ import annotations

import asyncio
import enum
import itertools
from pathlib import Path

import pytest

from coven_codex.codex.appserver.connection import CONNECTION_TRANSITIONS, ConnectionPhase
from coven_codex.codex.appserver.pool import POOL_TRANSITIONS, AppServerPool, PoolPhase
from coven_codex.codex.capabilities import CodexCapabilities, plan_driver
from coven_codex.codex.drivers import DRIVER_TRANSITIONS, DriverError, DriverPhase, create_driver, queue_sink
from coven_codex.codex.drivers.app_server import ATTACHMENT_TRANSITIONS, Attachment
from coven_codex.codex.drivers.events import DriverEvent
from coven_codex.codex.version import CodexVersion
from coven_codex.daemon.bootstrap import driver_settings
from coven_codex.settings import Settings
from coven_codex.support.lifecycle import Lifecycle, LifecycleError

TABLES: list[tuple[type[enum.Enum], frozenset[tuple[enum.Enum, enum.Enum]]]] = [
    (DriverPhase, DRIVER_TRANSITIONS),
    (Attachment, ATTACHMENT_TRANSITIONS),
    (ConnectionPhase, CONNECTION_TRANSITIONS),
    (PoolPhase, POOL_TRANSITIONS),
]
ALLOWED = [(table, a, b) for _, table in TABLES for a, b in sorted(table, key=lambda m: (m[0].value, m[1].value))]
FORBIDDEN = [
    (table, a, b)
    for phases, table in TABLES
    for a, b in itertools.product(phases, phases)
    if a is not b and (a, b) not in table
]


def _ids(move: tuple[object, enum.Enum, enum.Enum]) -> str:
    return f"{type(move[1]).__name__}:{move[1].value}->{move[2].value}"


@pytest.mark.parametrize("move", ALLOWED, ids=_ids)
def test_every_allowed_move_is_taken(move: tuple[frozenset[tuple[enum.Enum, enum.Enum]], enum.Enum, enum.Enum]) -> None:
    table, source, target = move
    life = Lifecycle("x", table, source, where="here")
    life.move(target)
    assert life.phase is target


@pytest.mark.parametrize("move", FORBIDDEN, ids=_ids)
def test_every_other_move_is_refused_and_the_phase_kept(
    move: tuple[frozenset[tuple[enum.Enum, enum.Enum]], enum.Enum, enum.Enum],
) -> None:
    table, source, target = move
    life = Lifecycle("the thing", table, source, where="its table")
    with pytest.raises(
        LifecycleError, match=f"the thing: no move from {source.value} to {target.value} \\(its table\\)"
    ):
        life.move(target)
    assert life.phase is source


def test_nothing_leaves_closed_and_every_phase_can_be_closed() -> None:
    for phases, table in [(DriverPhase, DRIVER_TRANSITIONS), (ConnectionPhase, CONNECTION_TRANSITIONS)]:
        closed = phases["CLOSED"]
        assert not [m for m in table if m[0] is closed]
        assert all((p, closed) in table for p in phases if p is not closed)


async def test_a_driver_closed_before_it_started_cannot_be_started(tmp_path: Path) -> None:
    settings = driver_settings(Settings(workspace=tmp_path))
    queue: asyncio.Queue[DriverEvent] = asyncio.Queue()
    plan = plan_driver(CodexCapabilities(version="0.47.0", why_not="no schema"))
    version = CodexVersion(0, 47, 0)
    driver = create_driver(
        tmp_path / "codex", version, tmp_path, env={}, settings=settings, sink=queue_sink(queue), plan=plan
    )
    assert driver.phase is DriverPhase.NEW
    await driver.aclose()
    assert driver.phase is DriverPhase.CLOSED
    with pytest.raises(DriverError, match=r"already started \(closed\)"):
        await driver.start(None)
    await driver.aclose()  # (closing twice is no move)
    assert driver.phase is DriverPhase.CLOSED


async def test_a_closed_pool_hands_out_no_connection(tmp_path: Path) -> None:
    pool = AppServerPool(
        [str(tmp_path / "codex")], env={}, cwd=tmp_path, settings=driver_settings(Settings(workspace=tmp_path))
    )
    await pool.aclose()
    with pytest.raises(DriverError, match="the Codex app-server pool is closed"):
        await pool.connect()
    await pool.aclose()
