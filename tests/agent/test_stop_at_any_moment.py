"""A stop at any moment (issue 26, item 11): SIGTERM to ``coven-codex run`` from its launch to well
after it serves, the real Codex 0.169.0 against the scripted model server.

Before: a SIGTERM 0.05-0.4 s after the launch (Python importing the daemon's modules), during
the settings checks or between the event loops took the default action: exit -15, no log line,
and whatever the daemon had begun (a probe's scratch, a lock) left as it was. Each stop must
exit 0, say so in the log, and leave nothing behind: no process of the run, no lock holding a
pid, no temporary file or folder.

The one moment no program can cover is before the interpreter runs any of its code (the kernel
applies the default action then). Just before it signals, the test reads whether the handler is
in place (``SigCgt`` in ``/proc/PID/status``) and whether the daemon's imports have begun
(pydantic's compiled core mapped, ``/proc/PID/maps``): once either holds, the stop must exit 0;
before both, the signal may end the process by the kernel's default. Nothing may be left behind
in any case.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from agent_harness import AgentHarness, make_responder

from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.processes import codex_processes
from coven_codex.testing.steps import Reply, Stall

pytestmark = [pytest.mark.codex, pytest.mark.timeout(600)]

Factory = Callable[[Path, ScriptedModelServer], AgentHarness]

DELAYS = (0.0, 0.01, 0.03, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.6, 0.8, 1.0, 1.3, 1.6, 2.0)
"""Seconds from the launch to the SIGTERM: the interpreter's start, the imports, the settings
checks, Codex's discovery, the locks, the app-server's start, recovery, serving."""
TEMPORARY = (".tmp", ".coven-validate-", ".toolbelt-", ".capabilities-", "coven-mcp-", "coven-version-")
"""What the names of the files and folders the daemon writes for a moment contain."""


def catches_sigterm(pid: int) -> bool:
    """Whether process ``pid`` has a handler for SIGTERM installed (``SigCgt``)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    return False


def importing_the_daemon(pid: int) -> bool:
    """Whether process ``pid`` has begun importing the daemon's modules (pydantic's core is loaded
    by the first of them, after ``coven-codex run`` installed its handler)."""
    with contextlib.suppress(OSError):
        return "_pydantic_core" in Path(f"/proc/{pid}/maps").read_text()
    return False


def processes_of_the_run(scratch: Path, codex_home: Path) -> list[str]:
    """Living processes started by the run: they inherit its private ``TMPDIR`` (or ``CODEX_HOME``)."""
    found = {p.pid: p for p in codex_processes(codex_home)}
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if process.status() != psutil.STATUS_ZOMBIE and process.environ().get("TMPDIR") == str(scratch):
                found[process.pid] = process
    described = []
    for process in found.values():
        with contextlib.suppress(psutil.Error):
            described.append(f"{process.pid} {' '.join(process.cmdline())[:120]}")
    return described


def left_behind(root: Path, scratch: Path) -> list[str]:
    """Temporary files and folders under ``root``, anything in ``scratch``, and lock files still
    holding a pid or still locked."""
    found = [str(path) for path in scratch.iterdir()]
    for path in root.rglob("*"):
        if path.is_relative_to(scratch) or ".codex-cli" in path.parts:
            continue
        if any(mark in path.name for mark in TEMPORARY):
            found.append(str(path))
        elif path.name == "daemon.lock":
            with path.open("rb+") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    found.append(f"{path} (still locked)")
                if lock.read():
                    found.append(f"{path} (still names a pid)")
    return found


async def test_sigterm_at_any_moment_from_launch_exits_0_and_leaves_nothing_behind(
    codex_bin_169: Path,
    model_server: ScriptedModelServer,
    harness_factory: Factory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scratch = tmp_path / "tmpdir"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))  # the daemon and everything it starts inherit it
    h = harness_factory(codex_bin_169, model_server)
    outcomes = []
    for delay in (*DELAYS, None):  # None: once it serves
        daemon = await h.start()
        if delay is None:
            await h.until_logged("ready (pid", timeout=120)
        else:
            await asyncio.sleep(delay)
        importing = importing_the_daemon(daemon.pid)
        handled = catches_sigterm(daemon.pid)
        daemon.process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(daemon.process.wait(), 60)
        log = daemon.log()
        outcomes.append((delay, importing, handled, code))
        if importing or handled:  # (before both, the interpreter may not have run any code of ours)
            assert code == 0, f"SIGTERM {delay}s after the launch: exit {code}\n{log[-3000:]}"
            assert "SIGTERM received" in log, f"SIGTERM {delay}s after the launch: no log line\n{log[-3000:]}"
        else:
            assert code in (0, -signal.SIGTERM), f"SIGTERM {delay}s after the launch: exit {code}\n{log[-3000:]}"
        assert not processes_of_the_run(scratch, h.codex_home), f"SIGTERM {delay}s after the launch\n{log[-3000:]}"
        assert not left_behind(tmp_path, scratch), f"SIGTERM {delay}s after the launch\n{log[-3000:]}"
    assert outcomes[-1] == (None, True, True, 0), outcomes


async def test_a_second_sigterm_during_shutdown_exits_1_at_once(codex_bin_169: Path, harness_factory: Factory) -> None:
    responder = make_responder({"stall": lambda r: (Stall(300.0), Reply("never"))})
    async with ScriptedModelServer(responder=responder) as server:
        h = harness_factory(codex_bin_169, server)
        daemon = await h.start("--kill-grace", "30")  # the shutdown waits for the stalled turn
        await h.until_logged("ready (pid", timeout=120)
        await h.think("c", "stall here")
        await h.wait_for(
            lambda es: any(getattr(e, "state", None) == "turn_started" for e in es), what="the turn", timeout=120
        )
        daemon.process.send_signal(signal.SIGTERM)
        await h.until_logged("SIGTERM received: shutting down")
        daemon.process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(daemon.process.wait(), 20) == 1, daemon.log()[-3000:]
        assert "second SIGTERM during shutdown: exiting now" in daemon.log()


# The daemon's event loop in one long step (a loaded machine) while its worker threads finish
# thousands of jobs: each completion writes a byte to the loop's self-pipe, which fills.
FLOODED = """
import asyncio, os, signal, threading, time
from coven_codex.cli.stopping import STOP

async def main() -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    STOP.install()
    STOP.bind(stop, loop)

    def finished_jobs_then_sigterm() -> None:
        for _ in range(5000):
            loop.call_soon_threadsafe(lambda: None)
        os.kill(os.getpid(), signal.SIGTERM)

    def a_long_step() -> None:
        worker = threading.Thread(target=finished_jobs_then_sigterm)
        worker.start()
        worker.join()
        time.sleep(0.2)

    loop.call_soon(a_long_step)
    try:
        async with asyncio.timeout(20):
            await stop.wait()
    finally:
        STOP.unbind()
    print("stopped by", STOP.describe())

asyncio.run(main())
"""


async def test_a_sigterm_while_the_loops_self_pipe_is_full_still_stops_it() -> None:
    # Before (issue 26 item 14a, the 0.47 shutdown "hang" with no log line): run's handler was
    # loop.add_signal_handler, which learns of a signal only from the byte the C handler writes to
    # the loop's self-pipe; that pipe also takes a byte per thread-safe call (every finished
    # asyncio.to_thread job), and 200-300 of them during one long loop step fill it: the signal's
    # byte was dropped ("BlockingIOError" on stderr) and the SIGTERM lost for good.
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", FLOODED, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()[-3000:]
    assert out.decode().strip() == "stopped by SIGTERM"
