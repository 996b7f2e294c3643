"""``coven-codex exec`` as a command, without running Codex: --dry-run prints the exact command and
environment and writes nothing; refused flags and bad options exit 2 with the reason."""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest


def tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        digest.update(str(path.relative_to(root)).encode())
        if path.is_file() and not path.is_symlink():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def coven(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    env.pop("CODEX_HOME", None)
    return subprocess.run(
        [sys.executable, "-m", "coven_codex", "exec", *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )


def test_dry_run_prints_the_exact_command_and_environment_and_changes_nothing(
    tmp_path: Path, codex_bin_169: Path
) -> None:
    codex = codex_bin_169
    (tmp_path / "home" / ".codex").mkdir(parents=True)
    (tmp_path / "home" / ".codex" / "auth.json").write_text("{}")
    (tmp_path / "base.toml").write_text('model = "m"\n')
    (tmp_path / "t.md").write_text("in $WORKSPACE_DIR for $WHO\n")
    before = tree_digest(tmp_path)
    done = coven(
        tmp_path,
        "--workspace",
        "W",
        "--codex-config",
        "base.toml",
        "--prompt-file",
        "t.md",
        "-V",
        "WHO=me",
        "--collect-traces",
        "--dry-run",
        "--codex-path",
        str(codex),
        "--",
        "exec",
        "-m",
        "m",
        "two words",
    )
    assert done.returncode == 0, done.stderr
    assert tree_digest(tmp_path) == before
    assert not (tmp_path / "W").exists()
    lines = done.stdout.splitlines()
    workspace = (tmp_path / "W").resolve()
    assert f"cd {shlex.quote(str(workspace))}" in lines
    assert f"export CODEX_HOME={shlex.quote(str(workspace / '.codex-home'))}" in lines
    argv = shlex.split(lines[-1])
    assert argv[1:] == ["exec", "--json", "-m", "m", "two words"]
    assert Path(argv[0]).is_absolute() and Path(argv[0]).name == "codex"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--", "exec", "--cd", "/tmp", "hi"], "--cd is refused: Codex always runs in --workspace"),
        (["--", "exec", "--json", "hi"], "--json is refused"),
        (["-V", "NOEQUALS", "--", "exec", "hi"], "-V 'NOEQUALS' is not KEY=VALUE"),
        (["--max-retries", "-1", "--", "exec", "hi"], "--max-retries -1 is negative"),
        (["--read-only-dir", "nowhere", "--", "exec", "hi"], "read-only directory nowhere does not exist"),
    ],
)
def test_what_the_user_must_fix_exits_2_with_the_reason_and_writes_nothing(
    tmp_path: Path, args: list[str], message: str
) -> None:
    done = coven(tmp_path, "--workspace", "W", *args)
    assert done.returncode == 2
    assert message in done.stderr
    assert done.stderr.count("coven-codex exec:") == 1
    assert not (tmp_path / "W").exists()
