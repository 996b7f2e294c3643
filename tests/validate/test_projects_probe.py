"""The ``projects`` probe: every ``[projects]`` directory lies inside the workspace or a ``workspace_roots`` entry
(links resolved), as ``run`` checks at start."""

from __future__ import annotations

from pathlib import Path

from coven_codex.settings import Settings
from coven_codex.validate.filesystem_probes import probe_projects
from coven_codex.validate.framework import ProbeContext, Status


async def test_projects_inside_the_roots_pass_and_one_outside_or_missing_fails(tmp_path: Path) -> None:
    workspace, root, outside = tmp_path / "ws", tmp_path / "root", tmp_path / "outside"
    for folder in (workspace / "api", root / "web", outside):
        folder.mkdir(parents=True)
    (workspace / "escape").symlink_to(outside)
    good = Settings(
        workspace=workspace, workspace_roots=[root], projects={"api": workspace / "api", "web": root / "web"}
    )
    result = await probe_projects(ProbeContext(settings=good))
    assert result.status is Status.PASS and "2 project(s): api, web" in result.detail
    bad = Settings(
        workspace=workspace,
        projects={"escape": workspace / "escape", "gone": workspace / "gone", "api": workspace / "api"},
    )
    result = await probe_projects(ProbeContext(settings=bad))
    assert result.status is Status.FAIL
    assert "project 'escape' in [projects]: cwd" in result.detail and "outside the workspace" in result.detail
    assert "project 'gone' in [projects]: cwd" in result.detail and "does not exist" in result.detail
    assert "'api'" not in result.detail and "[projects]" in result.fix
    assert (await probe_projects(ProbeContext(settings=Settings(workspace=workspace)))).status is Status.SKIP
