"""The one-shot workspace: git, the isolated CODEX_HOME inside it (the daemon's home preparation at
another place), the config merge, AGENTS.md, read-only directories, and reproducibility."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import pytest

from coven_codex.codex.home import MARKER_FILE, is_coven_codex_home
from coven_codex.oneshot.workspace import WorkspaceError, WorkspaceSpec, plan_workspace, prepare_workspace
from coven_codex.traces.otel_config import SECRET_HEADER, OtlpTarget

BASE = '# my settings\nmodel = "m"\n\n[sandbox_workspace_write]\nnetwork_access = true\n'


def environ(tmp_path: Path) -> dict[str, str]:
    return {"HOME": str(tmp_path / "user"), "PATH": os.environ["PATH"]}


def spec(tmp_path: Path, **kwargs: object) -> WorkspaceSpec:
    base = tmp_path / "base.toml"
    base.write_text(BASE)
    return WorkspaceSpec(workspace=tmp_path / "W", base_config=base, **kwargs)  # type: ignore[arg-type]


def test_prepared_workspace_has_git_the_home_inside_and_the_merged_config(tmp_path: Path) -> None:
    readonly = tmp_path / "data"
    readonly.mkdir()
    template = tmp_path / "t.md"
    template.write_text("Team $TEAM in $WORKSPACE_DIR; keep $L$.\n")
    s = spec(tmp_path, read_only_dirs=(readonly,), prompt_file=template, variables={"TEAM": "blue"})
    home = prepare_workspace(
        plan_workspace(s), otel=OtlpTarget("http://127.0.0.1:9", {SECRET_HEADER: "s3cret"}), environ=environ(tmp_path)
    )
    root = (tmp_path / "W").resolve()
    assert (root / ".git").is_dir()
    assert home.path == root / ".codex-home" and is_coven_codex_home(home.path) and (home.path / MARKER_FILE).exists()
    assert home.env["CODEX_HOME"] == str(root / ".codex-home")
    text = home.config_path.read_text()
    assert "# my settings" in text
    config = tomllib.loads(text)
    assert config["projects"][str(root)] == {"trust_level": "trusted"}
    assert config["sandbox_mode"] == "workspace-write" and config["approval_policy"] == "never"
    assert config["sandbox_workspace_write"] == {
        "network_access": True,  # the user's key is kept
        "writable_roots": [str(root)],
        "exclude_tmpdir_env_var": True,
        "exclude_slash_tmp": True,
    }
    exporter = config["otel"]["exporter"]["otlp-http"]
    assert exporter == {
        "endpoint": "http://127.0.0.1:9/v1/logs",
        "protocol": "binary",
        "headers": {SECRET_HEADER: "s3cret"},
    }
    traces = config["otel"]["trace_exporter"]["otlp-http"]
    assert traces["endpoint"] == "http://127.0.0.1:9/v1/traces" and traces["headers"] == {SECRET_HEADER: "s3cret"}
    assert (home.path / "AGENTS.md").read_text() == f"Team blue in {root}; keep $L$.\n"
    exclude = (root / ".git" / "info" / "exclude").read_text().splitlines()
    assert "/.codex-home/" in exclude and "/traces/" in exclude


def test_the_same_inputs_give_the_same_files(tmp_path: Path) -> None:
    s = spec(tmp_path)
    first = prepare_workspace(plan_workspace(s), otel=None, environ=environ(tmp_path))
    config, exclude = first.config_path.read_bytes(), (s.root / ".git" / "info" / "exclude").read_bytes()
    first.config_path.write_text("# edited by hand\n")
    again = prepare_workspace(plan_workspace(s), otel=None, environ=environ(tmp_path))
    assert again.config_path.read_bytes() == config  # copied fresh at every run
    assert (s.root / ".git" / "info" / "exclude").read_bytes() == exclude
    assert "otel" not in tomllib.loads(config.decode())


def test_unsubstituted_variables_are_listed_with_the_flag_to_set_them(tmp_path: Path) -> None:
    template = tmp_path / "t.md"
    template.write_text("$ZED, $ALPHA and $ZED; $L$ stays\n")
    with pytest.raises(
        WorkspaceError,
        match=r"uses \$ZED, \$ALPHA but no value was given; add them to the command line as -V NAME=VALUE",
    ):
        plan_workspace(spec(tmp_path, prompt_file=template))
    assert not (tmp_path / "W").exists()


def test_a_read_only_directory_inside_the_workspace_is_refused(tmp_path: Path) -> None:
    inside = tmp_path / "W" / "data"
    inside.mkdir(parents=True)
    with pytest.raises(WorkspaceError, match="lies inside the workspace"):
        plan_workspace(spec(tmp_path, read_only_dirs=(inside,)))
    with pytest.raises(WorkspaceError, match="does not exist"):
        plan_workspace(spec(tmp_path, read_only_dirs=(tmp_path / "missing",)))


def test_a_broken_base_config_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    base = tmp_path / "base.toml"
    base.write_text("model = \n")
    with pytest.raises(WorkspaceError, match="not valid TOML"):
        plan_workspace(WorkspaceSpec(workspace=tmp_path / "W", base_config=base))
    assert not (tmp_path / "W").exists()
