"""Finding Codex: explicit path, PATH, npm prefix; name validation; workspace refusal."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from coven_codex.codex import installed
from coven_codex.codex.discovery import DiscoveryError, find_codex, npm_global_prefix


def make_exe(path: Path, body: str = "#!/bin/sh\necho codex-cli 1.2.3\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def env_with_path(*dirs: Path) -> dict[str, str]:
    return {"PATH": os.pathsep.join(str(d) for d in dirs), "HOME": "/nonexistent"}


def test_explicit_path_wins(tmp_path: Path) -> None:
    exe = make_exe(tmp_path / "tools" / "my-codex")
    on_path = make_exe(tmp_path / "bin" / "codex")
    found = find_codex(str(exe), tmp_path / "ws", env=env_with_path(on_path.parent))
    assert found.path == exe
    assert found.source == "explicit"


def test_explicit_path_missing_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(DiscoveryError, match="does not exist"):
        find_codex(str(tmp_path / "nope" / "codex"), tmp_path / "ws", env=env_with_path())


def test_name_found_on_path(tmp_path: Path) -> None:
    exe = make_exe(tmp_path / "bin" / "codex")
    found = find_codex(None, tmp_path / "ws", env=env_with_path(tmp_path / "empty", exe.parent))
    assert found.path == exe
    assert found.source == "PATH"


@pytest.mark.parametrize("name", ["codex;rm -rf /", "co dex", "../codex", "codex$HOME", "codex.js", ""])
def test_bad_names_are_refused_before_lookup(tmp_path: Path, name: str) -> None:
    if name == "":
        # empty means "default" (codex); with an empty PATH and no npm, the project-installed CLI
        assert find_codex(name, tmp_path / "ws", env=env_with_path()).source == installed.SOURCE
        return
    if "/" in name:
        with pytest.raises(DiscoveryError, match="does not exist"):
            find_codex(name, tmp_path / "ws", env=env_with_path())
        return
    with pytest.raises(DiscoveryError, match="not a plain executable name"):
        find_codex(name, tmp_path / "ws", env=env_with_path())


def test_binary_inside_workspace_is_refused(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    make_exe(ws / "bin" / "codex")
    with pytest.raises(DiscoveryError, match="inside the workspace"):
        find_codex(None, ws, env=env_with_path(ws / "bin"))


def test_symlink_resolving_inside_workspace_is_refused(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    target = make_exe(ws / "evil" / "codex")
    link = tmp_path / "bin" / "codex"
    link.parent.mkdir()
    link.symlink_to(target)
    with pytest.raises(DiscoveryError, match="inside the workspace"):
        find_codex(None, ws, env=env_with_path(link.parent))


def test_symlink_into_workspace_via_explicit_path_is_refused(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    make_exe(ws / "codex")
    with pytest.raises(DiscoveryError, match="inside the workspace"):
        find_codex(str(ws / "codex"), ws, env=env_with_path())


def test_relative_path_entry_in_workspace_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = tmp_path / "ws"
    make_exe(ws / "codex")
    monkeypatch.chdir(ws)
    with pytest.raises(DiscoveryError, match="found only through the relative or empty PATH entries"):
        find_codex(None, ws, env={"PATH": ".", "HOME": "/nonexistent"})


def test_npm_global_prefix_is_the_last_resort(tmp_path: Path) -> None:
    prefix = tmp_path / "npm-global"
    exe = make_exe(prefix / "bin" / "codex")
    fake_npm = make_exe(tmp_path / "npmbin" / "npm", f"#!/bin/sh\necho {prefix}\n")
    found = find_codex(None, tmp_path / "ws", env=env_with_path(fake_npm.parent))
    assert found.path == exe
    assert found.source == "npm"


def test_npm_that_hangs_is_given_up_after_the_timeout(tmp_path: Path) -> None:
    fake_npm = make_exe(tmp_path / "npmbin" / "npm", "#!/bin/sh\nsleep 30\n")
    env = env_with_path(fake_npm.parent, Path("/bin"), Path("/usr/bin"))
    assert npm_global_prefix(env, timeout=0.5) is None


def test_nothing_found_says_how_to_install(tmp_path: Path) -> None:
    with pytest.raises(DiscoveryError, match="npm install -g @openai/codex"):
        find_codex("codex", tmp_path / "ws", env=env_with_path(tmp_path))


def test_real_pinned_cli_is_found_and_resolves_outside(tmp_path: Path, codex_bin_169: Path) -> None:
    found = find_codex(None, tmp_path / "ws", env=env_with_path(codex_bin_169.parent))
    assert found.path == codex_bin_169
    assert found.resolved.name == "codex.js"


def test_the_project_installed_cli_is_found_when_nothing_else_is(tmp_path: Path) -> None:
    """scripts/setup.sh installs the pinned CLI into .codex-cli/, on no PATH: run must still find it."""
    expected = installed.project_codex()
    assert expected is not None, "run scripts/setup.sh: the pinned Codex CLI is missing"
    found = find_codex(None, tmp_path / "ws", env=env_with_path(tmp_path / "empty"))
    assert (found.path, found.source) == (expected, "project-installed CLI")


def test_the_project_installed_cli_is_skipped_inside_the_workspace() -> None:
    with pytest.raises(DiscoveryError, match="--codex-path"):
        find_codex(None, installed.CHECKOUT, env={"PATH": "", "HOME": "/nonexistent"})


def test_a_configured_name_does_not_fall_back_to_the_project_installed_cli(tmp_path: Path) -> None:
    with pytest.raises(DiscoveryError, match="neither on PATH"):
        find_codex("codex", tmp_path / "ws", env=env_with_path(tmp_path / "empty"))
