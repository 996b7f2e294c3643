"""Attacks on where a journal's conversation state lives (issue 35): a journal's recorded identity
names a folder of the state directory, so whoever can write beside the journal must not be able to
point the daemon at another folder."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_harness import AgentHarness

from coven_codex.testing.model_server import ScriptedModelServer

pytestmark = [pytest.mark.codex, pytest.mark.timeout(120)]

Factory = Callable[[Path, ScriptedModelServer], AgentHarness]


@pytest.mark.parametrize("forged", ["../../../escape", "/tmp/elsewhere", "0123456789abcdef/../../x", ""])
async def test_a_forged_journal_identity_stops_the_start_and_names_the_file(
    forged: str, codex_bin_169: Path, harness_factory: Factory, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    h = harness_factory(codex_bin_169, model_server)
    cursors = tmp_path / "journal.jsonl.cursors"
    cursors.mkdir()
    (cursors / "journal-id").write_text(forged + "\n")
    daemon = await h.start()
    assert await asyncio.wait_for(daemon.process.wait(), 60) != 0
    log = daemon.log()
    assert f"the journal's identity in {cursors / 'journal-id'} is corrupt" in log, log[-2000:]
    assert "Traceback" not in log
    journals = h.state_dir / "journals"
    assert not journals.exists() or not any(journals.iterdir())
    assert not (tmp_path / "escape").exists() and not Path("/tmp/elsewhere").exists()
