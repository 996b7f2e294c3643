"""How Codex is started: the native binary of an npm install, else `<absolute node> <wrapper.js>`;
never anything found through a relative or empty PATH entry."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from coven_codex.codex.discovery import DiscoveryError, find_codex
from coven_codex.codex.launch import LaunchError, resolve_launch
from coven_codex.codex.version import detect_version

ROOT = Path(__file__).resolve().parents[2]


def _copy_wrapper(tmp_path: Path, version: str) -> Path:
    source = ROOT / ".codex-cli" / version / "node_modules" / "@openai" / "codex"
    package = tmp_path / "lib" / "node_modules" / "@openai" / "codex"
    (package / "bin").mkdir(parents=True)
    shutil.copy(source / "package.json", package / "package.json")
    shutil.copy(source / "bin" / "codex.js", package / "bin" / "codex.js")
    return package / "bin" / "codex.js"


def _exe(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.mark.parametrize("version", ["0.169.0", "0.47.0"])
def test_the_pinned_npm_installs_start_their_native_binary(version: str, tmp_path: Path) -> None:
    found = find_codex(str(ROOT / ".codex-cli" / version / "node_modules" / ".bin" / "codex"), tmp_path)
    launch = resolve_launch(found, {"PATH": "/usr/bin:/bin"})
    assert launch.kind == "native" and launch.command == (str(launch.program),)
    assert launch.program.name == "codex" and "vendor" in launch.program.parts
    env = launch.environment({"PATH": ":/usr/bin:.:bin:/bin", "CODEX_MANAGED_BY_BUN": "1"})
    assert env["CODEX_MANAGED_BY_NPM"] == "1"
    if version == "0.169.0":
        assert env["CODEX_MANAGED_PACKAGE_ROOT"] == str(found.resolved.parent.parent)
        assert "CODEX_MANAGED_BY_BUN" not in env
        assert env["PATH"] == "/usr/bin:/bin"
    else:  # 0.47's wrapper puts the bundled rg in front of PATH
        bundled = launch.program.parent.parent / "path"
        assert env["PATH"] == f"{bundled}:/usr/bin:/bin" and (bundled / "rg").exists()
    assert str(detect_version(launch.program, env=env, command=launch.command)) == version


def test_without_a_native_binary_the_wrapper_runs_under_an_absolute_node(tmp_path: Path) -> None:
    wrapper = _copy_wrapper(tmp_path, "0.169.0")
    node = _exe(tmp_path / "nodejs" / "bin" / "node", "#!/bin/sh\nexit 0\n")
    found = find_codex(str(wrapper), tmp_path / "ws")
    launch = resolve_launch(found, {"PATH": f"{node.parent}:/usr/bin"})
    assert launch.kind == "wrapper"
    assert launch.argv("app-server") == [str(node), str(wrapper.resolve()), "app-server"]
    assert "Node wrapper" in launch.describe()


@pytest.mark.parametrize("path", ["bin", ":bin", "bin:"])
def test_a_node_only_on_a_relative_entry_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    wrapper = _copy_wrapper(tmp_path, "0.169.0")
    monkeypatch.chdir(tmp_path / "lib")
    _exe(tmp_path / "lib" / "bin" / "node", "#!/bin/sh\nexit 0\n")
    if path != "bin":  # the empty entry is the current directory too
        _exe(tmp_path / "lib" / "node", "#!/bin/sh\nexit 0\n")
    found = find_codex(str(wrapper), tmp_path / "ws")
    with pytest.raises(LaunchError, match="found only through the relative or empty PATH entries"):
        resolve_launch(found, {"PATH": path})


def test_no_node_at_all_is_explained(tmp_path: Path) -> None:
    wrapper = _copy_wrapper(tmp_path, "0.47.0")
    found = find_codex(str(wrapper), tmp_path / "ws")
    with pytest.raises(LaunchError, match="`node` is not on PATH"):
        resolve_launch(found, {"PATH": str(tmp_path / "empty")})


def test_codex_is_never_looked_up_through_a_relative_path_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _exe(tmp_path / "here" / "codex", "#!/bin/sh\necho planted\n")
    monkeypatch.chdir(tmp_path / "here")
    with pytest.raises(DiscoveryError, match="found only through the relative or empty PATH entries"):
        find_codex(None, tmp_path / "ws", env={"PATH": f":{tmp_path / 'none'}", "HOME": "/nonexistent"})
    real = _exe(tmp_path / "real" / "codex", "#!/bin/sh\necho codex-cli 1.2.3\n")
    found = find_codex(None, tmp_path / "ws", env={"PATH": f".:{real.parent}", "HOME": "/nonexistent"})
    assert found.path == real


def test_any_other_executable_is_started_by_its_absolute_path(tmp_path: Path) -> None:
    exe = _exe(tmp_path / "tools" / "codex", "#!/bin/sh\necho codex-cli 1.2.3\n")
    launch = resolve_launch(find_codex(str(exe), tmp_path / "ws"), {"PATH": os.defpath})
    assert launch.kind == "executable" and launch.command == (str(exe),)


@pytest.mark.parametrize("version", ["0.169.0", "0.47.0"])
def test_validate_reports_the_launch_and_the_path_entries_left_out(version: str, tmp_path: Path) -> None:
    import subprocess
    import sys

    codex = ROOT / ".codex-cli" / version / "node_modules" / ".bin" / "codex"
    env = {**os.environ, "PATH": f":{os.environ['PATH']}"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "coven_codex",
            "validate",
            "--json",
            "--workspace",
            str(tmp_path),
            "--codex-path",
            str(codex),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
        cwd=tmp_path,
    )
    assert "started as the native binary" in done.stdout and "vendor" in done.stdout, done.stdout
    assert "left out of Codex's PATH" in done.stdout
