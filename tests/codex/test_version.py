"""Parsing `codex --version` and the capability flags; the real CLIs' versions."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from coven_codex.codex.version import CodexVersion, VersionError, detect_version, parse_version


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("codex-cli 0.169.0\n", (0, 169, 0)),
        ("codex-cli 0.47.0", (0, 47, 0)),
        ("WARNING: something\ncodex-cli 1.2.3-alpha.4\n", (1, 2, 3)),
        ("codex 0.100.10", (0, 100, 10)),
    ],
)
def test_parse(output: str, expected: tuple[int, int, int]) -> None:
    assert parse_version(output).triple == expected


def test_parse_keeps_suffix_and_raw() -> None:
    version = parse_version("codex-cli 1.2.3-alpha.4")
    assert version.suffix == "alpha.4"
    assert version.raw == "codex-cli 1.2.3-alpha.4"
    assert str(version) == "1.2.3-alpha.4"


@pytest.mark.parametrize("output", ["", "codex-cli", "hello world", "codex-cli 1.2"])
def test_unparseable(output: str) -> None:
    with pytest.raises(VersionError, match="cannot read a version"):
        parse_version(output)


def test_config_details_by_version() -> None:
    new, old = CodexVersion(0, 169, 0), CodexVersion(0, 47, 0)
    assert new.supports_tools_approval_mode and not old.supports_tools_approval_mode
    assert old.supported and not CodexVersion(0, 30, 0).supported
    assert old < new


def test_detect_times_out_and_kills_the_group(tmp_path: Path) -> None:
    script = tmp_path / "codex"
    # the grandchild keeps stdout open: plain subprocess.run would hang here
    script.write_text("#!/bin/sh\nsleep 30 &\nsleep 30\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(VersionError, match="did not answer"):
        detect_version(script, timeout=0.5)


def test_detect_reports_failure(tmp_path: Path) -> None:
    script = tmp_path / "codex"
    script.write_text("#!/bin/sh\necho broken >&2\nexit 3\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(VersionError, match="exit 3: broken"):
        detect_version(script)


@pytest.mark.codex
def test_real_cli_versions(codex_bin: Path, codex_version: str, tmp_path: Path) -> None:
    version = detect_version(codex_bin, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert str(version) == codex_version


@pytest.mark.codex
def test_reading_the_version_never_writes_to_the_users_codex_home(tmp_path: Path, codex_bin: Path) -> None:
    """`codex --version` writes helper links under $CODEX_HOME/tmp (by default ~/.codex): the
    probe gives it a scratch CODEX_HOME, so the user's own Codex directory is never touched."""
    import os

    home = tmp_path / "home"
    home.mkdir()
    env = {key: value for key, value in os.environ.items() if key != "CODEX_HOME"}
    env["HOME"] = str(home)
    # Codex creates no helper links under its temporary directory; tmp_path is under /tmp, so
    # Codex gets a temporary directory of its own elsewhere, and would write into this HOME.
    (tmp_path / "codex-tmp").mkdir()
    env["TMPDIR"] = str(tmp_path / "codex-tmp")
    detect_version(codex_bin, env=env)
    assert sorted(str(path.relative_to(home)) for path in home.rglob("*")) == []
