"""A benchmark's baseline, an older revision of the code, runs from a fresh clone (issue 26, item 15):
what it declares and this environment no longer has (``jsonrpcserver``) is installed beside it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from _common import ROOT, export_baseline, missing_requirements
from bench_restart import BACKLOG_BASELINE_REV
from bench_restart import BASELINE_REV as RESTART_BASELINE_REV
from bench_scale import BASELINE_REV as SCALE_BASELINE_REV

pytestmark = pytest.mark.timeout(600)

DAEMON_IMPORTS = "import coven_codex.agent.bootstrap, coven_codex.mcp; print(coven_codex.__file__)"
"""What ``coven-codex run`` imports before it serves, in the baselines' revisions (before issue 29 moved it to
``coven_codex.daemon.bootstrap``; their ``coven_codex.mcp`` needs
``jsonrpcserver``)."""


def test_the_baselines_of_the_restart_and_scale_benchmarks_import_what_their_daemon_runs(tmp_path: Path) -> None:
    if not (ROOT / ".git").exists():
        raise AssertionError("this test needs the git history (the baselines are exported from it)")
    for n, rev in enumerate(sorted({RESTART_BASELINE_REV, BACKLOG_BASELINE_REV, SCALE_BASELINE_REV})):
        code = export_baseline(rev, tmp_path / str(n))
        imported = subprocess.run(
            [sys.executable, "-c", DAEMON_IMPORTS],
            cwd=code.source,
            env={"PYTHONPATH": code.pythonpath, "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            check=False,
        )
        assert imported.returncode == 0, f"{rev}: {imported.stderr[-2000:]}"
        assert Path(imported.stdout.strip()).is_relative_to(code.source), (rev, imported.stdout)


def test_a_baseline_needing_nothing_more_is_the_export_alone(tmp_path: Path) -> None:
    code = export_baseline(BACKLOG_BASELINE_REV, tmp_path)
    assert missing_requirements(code.source / "pyproject.toml") == []
    assert code.pythonpath == str(code.source)
