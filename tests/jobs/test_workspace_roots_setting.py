"""``workspace_roots`` and ``max_jobs`` as settings: coven.toml (relative to the file) and flags."""

from __future__ import annotations

from pathlib import Path

from coven_codex.cli.main import build_parser
from coven_codex.cli.run import settings_from_args
from coven_codex.settings import load_settings


def test_relative_roots_in_coven_toml_are_relative_to_the_file(tmp_path: Path) -> None:
    config = tmp_path / "conf" / "coven.toml"
    config.parent.mkdir()
    config.write_text('workspace_roots = ["projects", "/srv/other", "~/mine"]\nmax_jobs = 2\n')
    settings = load_settings(config)
    assert settings.workspace_roots == [config.parent / "projects", Path("/srv/other"), Path("~/mine").expanduser()]
    assert settings.max_jobs == 2


def test_run_flags_give_the_roots_and_the_job_bound(tmp_path: Path) -> None:
    parser, _ = build_parser(only="run")
    args = parser.parse_args(
        ["run", "--workspace-root", str(tmp_path / "a"), "--workspace-root", str(tmp_path / "b"), "--max-jobs", "3"]
    )
    settings = settings_from_args(args)
    assert settings.workspace_roots == [tmp_path / "a", tmp_path / "b"] and settings.max_jobs == 3
    assert settings_from_args(parser.parse_args(["run"])).workspace_roots == []
