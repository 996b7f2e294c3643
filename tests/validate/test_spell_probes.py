import time
from pathlib import Path

import pytest

from coven_codex.settings import Settings
from coven_codex.validate import spell_probes
from coven_codex.validate.framework import ProbeContext, Status
from coven_codex.validate.spell_probes import probe_shim_handshake, probe_shim_version, probe_spells

ROOT = Path(__file__).resolve().parents[2]


def _context(tmp_path: Path, spells: list[str]) -> ProbeContext:
    return ProbeContext(settings=Settings(workspace=tmp_path, spells=spells))


async def test_spells_pass_and_the_handshake_lists_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # examples/ is found from the current directory; the workspace is elsewhere
    context = _context(tmp_path, ["examples.spells_example:spells"])
    result = await probe_spells(context)
    assert result.status is Status.PASS, result
    assert "add" in result.detail and "divide" in result.detail
    handshake = await probe_shim_handshake(context)
    assert handshake.status is Status.PASS, handshake
    assert "4 tool(s)" in handshake.detail


async def test_missing_spell_module_fails_with_a_fix(tmp_path: Path) -> None:
    result = await probe_spells(_context(tmp_path, ["no_such_module_xyz:spells"]))
    assert result.status is Status.FAIL
    assert "no_such_module_xyz" in result.detail
    assert result.fix


async def test_spell_module_that_raises_on_import_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "broken_spells.py").write_text("raise RuntimeError('config missing')\n")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ws").mkdir()
    result = await probe_spells(_context(tmp_path / "ws", ["broken_spells:spells"]))
    assert result.status is Status.FAIL
    assert "config missing" in result.detail


async def test_shim_version_answers(tmp_path: Path) -> None:
    result = await probe_shim_version(_context(tmp_path, []))
    assert result.status is Status.PASS, result
    assert result.detail.startswith("coven-mcp-shim ")


def _fake_shim(monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    """Make the probes launch ``sh -c script`` where they would launch the shim."""
    monkeypatch.setattr(spell_probes, "shim_command", lambda socket: ("/bin/sh", ["-c", script], {}))


async def test_shim_that_fails_to_start_fails_the_version_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spell_probes, "shim_command", lambda socket: ("/bin/false", [], {}))
    result = await probe_shim_version(_context(tmp_path, []))
    assert result.status is Status.FAIL and "Reinstall" in result.fix


async def test_shim_that_hangs_fails_the_version_probe_within_one_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow = tmp_path / "slow-python"
    slow.write_text("#!/bin/sh\nsleep 30\n")
    slow.chmod(0o755)
    monkeypatch.setattr(spell_probes, "shim_command", lambda socket: (str(slow), [], {}))
    started = time.monotonic()
    result = await probe_shim_version(_context(tmp_path, []))
    assert time.monotonic() - started < 2
    assert result.status is Status.FAIL and "within 1 s" in result.detail


async def test_shim_that_never_answers_fails_the_handshake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_shim(monkeypatch, "echo 'coven-mcp-shim: cannot reach the daemon' >&2; exit 3")
    result = await probe_shim_handshake(_context(tmp_path, []))
    assert result.status is Status.FAIL
    assert "cannot reach the daemon" in result.detail
