"""Every Codex release on the driver its capabilities give it, end to end (docs/rollout.md,
"Which driver each Codex version gets"): ``coven-codex run`` as a subprocess with the real CLI of
each version and the scripted model server, one conversation through a reply, a spell call, a
model error and a Codex killed mid-turn, then a reply again. Every turn ends exactly once.

:data:`CI_VERSIONS` run in every test run (CI: 0.47.0, 0.169.0, the newest 0.171.0 and two
releases between them, one on each driver); the other releases of :data:`MATRIX` are marked ``matrix`` and run with
``-m matrix`` (their CLIs are installed on first use by ``scripts/install-codex.sh``).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from agent_harness import AgentHarness, make_responder, replies

from coven_codex.codex.capabilities import detect_capabilities, plan_driver
from coven_codex.codex.discovery import FoundExecutable
from coven_codex.codex.launch import resolve_launch
from coven_codex.codex.version import detect_version
from coven_codex.entries import BaseEntry, ErrorEntry, StatusEntry
from coven_codex.rollout import TURN_END_STATES
from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.processes import codex_processes
from coven_codex.testing.steps import CallTool, HttpError, Reply, Stall

pytestmark = [pytest.mark.codex, pytest.mark.timeout(300)]

Factory = Callable[[Path, ScriptedModelServer], AgentHarness]
CodexOf = Callable[[str], Path]

CI_VERSIONS = ("0.47.0", "0.135.0", "0.147.0", "0.169.0", "0.171.0")
"""Run every time (CI): the oldest, the newest (0.171.0), the pinned default (0.169.0, which the
fixtures and most live tests use), one release between them on each driver. The newest costs about
5 s of a 30-minute suite (its end-to-end test 3.7 s and its capability probe 1.0 s, measured on the
shared 2-core machine; 0.169.0's end-to-end test took 5.4 s in the same run) and is the release
users install: it runs every time."""
MATRIX = ("0.47.0", "0.58.0", "0.104.0", "0.118.0", "0.135.0", "0.140.0", "0.147.0", "0.160.0", "0.169.0", "0.171.0")
"""Every release the driver table of docs/rollout.md names."""

EXEC_CANCELS_SPELLS = frozenset({"0.118.0"})
"""Releases whose ``codex exec`` cancels every MCP tool call ("user cancelled MCP tool call") even
with ``default_tools_approval_mode = "approve"`` (a Codex bug; docs/rollout.md)."""
FAILED_TURN_RECORDED_AS_COMPLETED = frozenset({"0.104.0", "0.118.0", "0.135.0", "0.140.0"})
"""Releases whose rollout records a failed turn as a plain ``task_complete`` (no ``error``): egress
ends it ``turn_completed``, and the session's error entry from the driver's report follows
(docs/rollout.md)."""

SPELLS_MODULE = '''
def shout(text: str) -> str:
    """Upper-case the text."""
    return text.upper() + "!"
'''


def versions() -> list[object]:
    """:data:`MATRIX`, the releases outside :data:`CI_VERSIONS` marked ``matrix``."""
    return [pytest.param(v, id=f"codex-{v}", marks=() if v in CI_VERSIONS else (pytest.mark.matrix,)) for v in MATRIX]


def documented_drivers() -> dict[str, str]:
    """Version → driver, from the table in docs/rollout.md."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "rollout.md").read_text()
    table = doc[doc.index("## Which driver each Codex version gets") :]
    table = table[: table.index("\n\n", table.index("| version"))]
    return dict(re.findall(r"^\| (\d+\.\d+\.\d+) \| (app-server|exec) \|", table, re.M))


def test_the_table_names_every_matrix_version() -> None:
    assert sorted(documented_drivers(), key=lambda v: tuple(map(int, v.split(".")))) == list(MATRIX)


@pytest.mark.parametrize("version", versions())
def test_the_docs_table_is_the_drivers_decision(version: str, tmp_path: Path, codex_of: CodexOf) -> None:
    """The driver docs/rollout.md names for each version is what its capabilities decide."""
    executable = codex_of(version)
    launch = resolve_launch(FoundExecutable(executable, executable.resolve(), "explicit"))
    env = launch.environment({"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    detected = detect_version(launch.program, env=env, command=launch.command)
    capabilities = detect_capabilities(launch.program, launch.command, detected, env=env, cache_dir=tmp_path)
    assert plan_driver(capabilities).driver == documented_drivers()[version]


def turn_ends(entries: list[BaseEntry]) -> list[StatusEntry]:
    return [e for e in entries if isinstance(e, StatusEntry) and e.state in TURN_END_STATES]


async def until(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    """Wait (at most ``timeout`` seconds) until ``condition()`` holds."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.05)


def _kill_codex(h: AgentHarness, daemon_pid: int) -> int:
    """SIGKILL every Codex process the daemon started (the exec turn's, or the shared app-server)."""
    killed = 0
    for proc in codex_processes(h.codex_home):
        with contextlib.suppress(psutil.Error):
            if proc.ppid() == daemon_pid:
                proc.kill()
                killed += 1
    return killed


@pytest.mark.parametrize("version", versions())
async def test_reply_spell_error_and_kill_mid_turn(version: str, harness_factory: Factory, codex_of: CodexOf) -> None:
    responder = make_responder(
        {
            "shout": lambda r: CallTool("coven.shout", {"text": "hello"}),
            "fail": lambda r: HttpError(401, "Incorrect API key provided"),
            "slow": lambda r: (Stall(60.0), Reply("never")),
        }
    )
    async with ScriptedModelServer(responder=responder) as server:
        h = harness_factory(codex_of(version), server)
        (h.tmp / "matrix_spells.py").write_text(SPELLS_MODULE)
        daemon = await h.start("--spells", "matrix_spells:shout")
        log = await h.until_logged("driver ")
        driver = documented_drivers()[version]
        assert f"driver {driver}: " in log  # the start-up log names the driver and why

        await h.think("m", "hello")
        await h.wait_for(lambda es: "echo: hello" in replies(es, "m"), what="the first reply")
        await h.think("m", "shout hello")
        entries = await h.wait_for(lambda es: len(turn_ends(es)) >= 2, what="the spell turn's end")
        results = [e for e in entries if e.kind == "tool_result" and e.conversation == "m"]
        assert results, "no tool result"
        if version in EXEC_CANCELS_SPELLS:
            assert "user cancelled MCP tool call" in results[0].text
        else:
            assert "HELLO!" in results[0].text and not getattr(results[0], "is_error", True)
        await h.think("m", "fail now")
        await h.wait_for(lambda es: len(turn_ends(es)) >= 3, what="the failed turn's end")
        await h.think("m", "slow one")
        await until(lambda: any("slow one" in r.user_texts() for r in server.requests.responses_requests()))
        assert _kill_codex(h, daemon.pid), "no Codex process found"
        await h.wait_for(lambda es: len(turn_ends(es)) >= 4, what="the killed turn's end")
        await h.think("m", "after the kill")
        await h.wait_for(lambda es: "echo: after the kill" in replies(es, "m"), what="the reply after the kill")
        await h.wait_for(lambda es: len(turn_ends(es)) >= 5, what="the last turn's end")
        assert await h.stop(daemon) == 0
    entries = await h.entries()
    ids = [e.id for e in entries]
    assert len(ids) == len(set(ids))
    ends = turn_ends(entries)
    # Exactly one end per turn, whichever writer (egress from the rollout, the session from the
    # driver) came first; a killed turn's end is not written again when the rollout closes it.
    completed, failed = "turn_completed", "turn_failed"
    error_end = completed if version in FAILED_TURN_RECORDED_AS_COMPLETED else failed
    assert [e.state for e in ends] == [completed, completed, error_end, failed, completed]
    errors = [e for e in entries if isinstance(e, ErrorEntry)]
    assert [e.code for e in errors] == ["AUTH", "PROCESS_EXITED"], [e.text for e in errors]
    assert replies(entries, "m")[-1] == "echo: after the kill" and "never" not in replies(entries, "m")
    # Every thought reached Codex once: the thread's last request holds each exactly once.
    last = server.requests.responses_requests()[-1].user_texts()
    for thought in ("hello", "shout hello", "fail now", "slow one", "after the kill"):
        assert last.count(thought) == 1, (thought, last)
