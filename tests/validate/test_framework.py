import asyncio
import json
import time
from pathlib import Path

from coven_codex.settings import Settings
from coven_codex.validate.filesystem_probes import (
    probe_codex_home,
    probe_journal,
    probe_sessions_folder,
    probe_state_dir,
    probe_timeouts,
    probe_workspace,
)
from coven_codex.validate.framework import Probe, ProbeContext, ProbeResult, Status, exit_code, run_plan
from coven_codex.validate.report import render_json, render_table


async def _hangs(_: ProbeContext) -> ProbeResult:
    await asyncio.sleep(3600)
    return ProbeResult.ok("never")


async def _passes(_: ProbeContext) -> ProbeResult:
    return ProbeResult.ok("fine")


async def _crashes(_: ProbeContext) -> ProbeResult:
    raise RuntimeError("probe bug")


def _context(tmp_path: Path, **overrides: object) -> ProbeContext:
    settings = Settings.model_validate({"workspace": tmp_path, **overrides})
    return ProbeContext(settings=settings, raw_settings=dict(overrides))


async def test_a_hanging_probe_fails_within_its_bound_and_the_plan_goes_on(tmp_path: Path) -> None:
    plan = [
        Probe("hang", "hangs", _hangs, timeout=0.2),
        Probe("after", "runs after", _passes, timeout=1),
        Probe("dependent", "needs hang", _passes, timeout=1, needs=("hang",)),
        Probe("crash", "crashes", _crashes, timeout=1, required=False),
    ]
    started = time.monotonic()
    outcomes = await run_plan(plan, _context(tmp_path))
    assert time.monotonic() - started < 2
    statuses = [o.result.status for o in outcomes]
    assert statuses == [Status.FAIL, Status.PASS, Status.SKIP, Status.FAIL]
    assert "0.2 s" in outcomes[0].result.detail
    assert "probe bug" in outcomes[3].result.detail
    assert exit_code(outcomes) == 1
    assert exit_code(outcomes[1:]) == 0  # an optional failure does not block
    table = render_table(outcomes)
    assert "NOT READY" in table and "hang" in table
    data = json.loads(render_json(outcomes))
    assert data["ok"] is False
    assert [c["code"] for c in data["checks"]] == ["hang", "after", "dependent", "crash"]


async def test_workspace_probe_pass_and_fail(tmp_path: Path) -> None:
    assert (await probe_workspace(_context(tmp_path))).status is Status.PASS
    missing = await probe_workspace(_context(tmp_path / "nope"))
    assert missing.status is Status.FAIL and "mkdir -p" in missing.fix


async def test_unwritable_workspace_fails() -> None:
    # /proc refuses new files even for root, unlike a chmod'ed folder
    result = await probe_workspace(_context(Path("/proc")))
    assert result.status is Status.FAIL
    assert "not writable" in result.detail and "write access" in result.fix


async def test_unwritable_state_dir_fails(tmp_path: Path) -> None:
    result = await probe_state_dir(_context(tmp_path, state_dir=Path("/proc/coven-state")))
    assert result.status is Status.FAIL and "state_dir" in result.fix
    assert (await probe_state_dir(_context(tmp_path))).status is Status.PASS


async def test_workspace_that_is_a_file_fails(tmp_path: Path) -> None:
    file = tmp_path / "f"
    file.write_text("x")
    result = await probe_codex_home(_context(tmp_path, codex_home=file / "sub"))
    assert result.status is Status.FAIL
    assert "not a folder" in result.detail


async def test_writability_probe_leaves_nothing_behind(tmp_path: Path) -> None:
    before = set(tmp_path.iterdir())
    await probe_workspace(_context(tmp_path))
    await probe_codex_home(_context(tmp_path))
    assert set(tmp_path.iterdir()) == before


async def test_journal_probe(tmp_path: Path) -> None:
    assert (await probe_journal(_context(tmp_path, journal=tmp_path / "j.jsonl"))).status is Status.PASS
    missing = await probe_journal(_context(tmp_path, journal=tmp_path / "no" / "j.jsonl"))
    assert missing.status is Status.FAIL and "does not exist" in missing.detail
    assert (await probe_journal(_context(tmp_path))).status is Status.WARN


async def test_sessions_probe(tmp_path: Path) -> None:
    assert (await probe_sessions_folder(_context(tmp_path))).status is Status.PASS
    home = _context(tmp_path).settings.resolved_codex_home
    home.mkdir(parents=True)
    (home / "sessions").write_text("not a folder")
    assert (await probe_sessions_folder(_context(tmp_path))).status is Status.FAIL


async def test_timeouts_probe_reports_clamping(tmp_path: Path) -> None:
    assert (await probe_timeouts(_context(tmp_path))).status is Status.PASS
    clamped = await probe_timeouts(_context(tmp_path, turn_timeout=5, stream_idle_timeout=1))
    assert clamped.status is Status.WARN
    assert "turn_timeout 5 → 30" in clamped.detail
