"""Attacks on the daemon's trust in its surroundings: forged state, planted executables and modules."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from agent_harness import AgentHarness, replies

from coven_codex.codex.process import TREE_MARKER
from coven_codex.testing.model_server import ScriptedModelServer

pytestmark = [pytest.mark.codex, pytest.mark.timeout(240)]

Factory = Callable[[Path, ScriptedModelServer], AgentHarness]
ROOT = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_forged_processes_json_in_the_workspace_kills_nothing(
    codex_bin_169: Path, model_server: ScriptedModelServer, harness_factory: Factory
) -> None:
    """Anyone who can write the workspace (Codex's commands, a commit) forges a process record."""
    h = harness_factory(codex_bin_169, model_server)
    env = {k: v for k, v in os.environ.items() if k not in (TREE_MARKER, "CODEX_HOME")}
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env=env, start_new_session=True)
    try:
        forged = {"x": [{"pid": victim.pid, "create_time": psutil.Process(victim.pid).create_time()}]}
        (h.workspace / ".coven").mkdir()
        (h.workspace / ".coven" / "processes.json").write_text(json.dumps(forged))
        daemon = await h.start()
        log = await h.until_logged("ready (pid")
        await h.think("red", "still working?")
        await h.wait_for(lambda es: "echo: still working?" in replies(es, "red"), what="the reply")
        assert _alive(victim.pid), f"the daemon ended a process it did not start:\n{log[-3000:]}"
        assert "ending them" not in log
        assert log.count("leaving them alone") == 1
        assert await h.stop(daemon) == 0
    finally:
        victim.kill()
        victim.wait()


PLANTED = """
from pathlib import Path
Path({marker!r}).write_text("imported")
def spells() -> str:
    '''A planted spell.'''
    return "pwned"
"""


def _plant(folder: Path, name: str, marker: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(PLANTED.format(marker=str(marker)))


def _coven(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coven_codex", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


def _command(command: str, workspace: Path, tmp_path: Path, codex_bin: Path) -> list[str]:
    if command == "run":
        return [
            "run",
            "--workspace",
            str(workspace),
            "--journal",
            str(tmp_path / "j.jsonl"),
            "--codex-path",
            str(codex_bin),
            "--state-dir",
            str(tmp_path / "state"),
            "--codex-home",
            str(tmp_path / "home"),
        ]
    if command == "validate":
        return ["validate", "--json", "--workspace", str(workspace), "--codex-path", str(codex_bin)]
    return ["spells", "--workspace", str(workspace)]


@pytest.mark.parametrize("command", ["run", "validate", "spells"])
@pytest.mark.parametrize("where", ["workspace", "workspace-subfolder"])
def test_a_spell_module_planted_in_the_workspace_is_never_imported(
    tmp_path: Path, codex_bin_169: Path, command: str, where: str
) -> None:
    """Started from inside the workspace (its modules come first for `python -m`), or naming a
    package in it: the module is refused before it runs."""
    workspace = tmp_path / "ws"
    marker = tmp_path / "marker"
    if where == "workspace":
        _plant(workspace, "planted_spells", marker)
        source, cwd = "planted_spells:spells", workspace
    else:
        _plant(workspace / "tools", "planted_spells", marker)
        (workspace / "tools" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('pkg')\n")
        source, cwd = "tools.planted_spells:spells", workspace
    done = _coven(*_command(command, workspace, tmp_path, codex_bin_169), "--spells", source, cwd=cwd)
    assert not marker.exists(), f"{command} imported a module from the workspace:\n{done.stdout}\n{done.stderr}"
    assert done.returncode != 0
    said = done.stdout + done.stderr
    assert "inside the workspace" in said and "install it as a package" in said, said


@pytest.mark.parametrize("command", ["run", "validate", "spells"])
def test_a_spell_module_outside_cannot_pull_a_helper_from_the_workspace(
    tmp_path: Path, codex_bin_169: Path, command: str
) -> None:
    """A legitimate spell module that imports a name the workspace also has gets nothing from it."""
    workspace = tmp_path / "ws"
    marker = tmp_path / "marker"
    _plant(workspace, "shadowed_helper", marker)
    spells_dir = tmp_path / "spells"
    spells_dir.mkdir()
    (spells_dir / "honest_spells.py").write_text(
        "try:\n    import shadowed_helper  # noqa: F401\nexcept ImportError:\n    pass\n"
        "def hello() -> str:\n    '''Say hello.'''\n    return 'hi'\n"
    )
    env = {**os.environ, "PYTHONPATH": str(spells_dir)}
    args = _command(command, workspace, tmp_path, codex_bin_169)
    if command != "run":
        done = _coven(*args, "--spells", "honest_spells:hello", cwd=workspace, env=env)
        assert not marker.exists(), f"{command} imported a module from the workspace:\n{done.stderr}"
        assert "hello" in done.stdout, done.stdout + done.stderr
        return
    daemon = subprocess.Popen(
        [sys.executable, "-m", "coven_codex", *args, "--spells", "honest_spells:hello"],
        cwd=workspace,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert daemon.stderr is not None
        seen = []
        for line in daemon.stderr:
            seen.append(line)
            if "ready (pid" in line:
                break
        # hello and the built-in send_file (files out, every daemon serves it)
        assert any("2 spell(s) served" in line for line in seen), "".join(seen)
        assert not marker.exists(), "run imported a module from the workspace"
    finally:
        daemon.terminate()
        daemon.communicate(timeout=60)


PLANTED_NODE = """#!/bin/sh
echo "planted node ran: $*" >> {marker}
exit 1
"""


async def test_a_node_planted_in_the_workspace_never_runs(
    codex_bin: Path,
    model_server: ScriptedModelServer,
    harness_factory: Factory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With an empty and a `.` entry in PATH, npm's `#!/usr/bin/env node` would find the workspace's
    `node` (Codex runs with the workspace as its current directory)."""
    marker = tmp_path / "planted-node-ran"
    h = harness_factory(codex_bin, model_server)
    node = h.workspace / "node"
    node.write_text(PLANTED_NODE.format(marker=marker))
    node.chmod(0o755)
    monkeypatch.setenv("PATH", f":{os.environ['PATH']}:.")
    daemon = await h.start()
    log = await h.until_logged("ready (pid")
    await h.think("red", "who runs?")
    await h.wait_for(lambda es: "echo: who runs?" in replies(es, "red"), what="the reply")
    assert await h.stop(daemon) == 0
    assert not marker.exists(), marker.read_text()
    assert "started as the native binary" in log
    assert log.count("PATH has relative or empty entries") == 1


def _wrapper_without_native(tmp_path: Path, version: str) -> Path:
    """An npm install of Codex whose native binary is missing (only the Node wrapper is left)."""
    source = ROOT / ".codex-cli" / version / "node_modules" / "@openai" / "codex"
    package = tmp_path / "npm" / "node_modules" / "@openai" / "codex"
    (package / "bin").mkdir(parents=True)
    (package / "package.json").write_bytes((source / "package.json").read_bytes())
    (package / "bin" / "codex.js").write_bytes((source / "bin" / "codex.js").read_bytes())
    (package / "bin" / "codex.js").chmod(0o755)
    return package / "bin" / "codex.js"


@pytest.mark.parametrize("command", ["run", "validate"])
def test_node_reachable_only_through_a_relative_path_entry_is_refused(tmp_path: Path, command: str) -> None:
    wrapper = _wrapper_without_native(tmp_path, "0.169.0")
    marker = tmp_path / "planted-node-ran"
    workspace = tmp_path / "ws"
    (workspace / "bin").mkdir(parents=True)
    (workspace / "bin" / "node").write_text(PLANTED_NODE.format(marker=marker))
    (workspace / "bin" / "node").chmod(0o755)
    env = {**os.environ, "PATH": "bin"}  # node only through a relative entry; the cwd is the workspace
    args = _command(command, workspace, tmp_path, wrapper)
    done = subprocess.run(
        [sys.executable, "-m", "coven_codex", *args],
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    said = done.stdout + done.stderr
    assert done.returncode != 0, said
    assert not marker.exists()
    assert "`node` is found only through the relative or empty PATH entries 'bin'" in said.replace("\n", " ")
