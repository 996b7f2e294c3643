"""The [mcp_servers.coven] entry (checked by the real CLIs), the toolbelt file and `coven-codex spells`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomlkit

from coven_codex.cli.main import main as cli_main
from coven_codex.mcp import SpellRegistry, codex_mcp_entry, write_toolbelt
from coven_codex.mcp.codex_entry import supports_approval_mode
from coven_codex.settings import default_state_dir
from mcp_shim import wire

ROOT = Path(__file__).resolve().parents[2]


def test_entry_for_new_and_old_codex() -> None:
    new = codex_mcp_entry("/run/x/mcp.sock", "s" * 32, "0.169.0", tool_timeout=30)
    assert new["command"] == sys.executable
    assert new["args"][0] == "-S" and new["args"][-2:] == ["--socket", "/run/x/mcp.sock"]
    assert Path(new["args"][1]) == Path(new["env"]["PYTHONPATH"], "mcp_shim", "__main__.py")
    assert new["env"][wire.SECRET_ENV] == "s" * 32
    assert Path(new["env"]["PYTHONPATH"], "mcp_shim", "__main__.py").is_file()
    assert new["default_tools_approval_mode"] == "approve"
    assert new["startup_timeout_sec"] == 20.0 and new["tool_timeout_sec"] == 40.0
    assert new["required"] is True  # Codex waits for the spells
    old = codex_mcp_entry("/run/x/mcp.sock", "s" * 32, "codex-cli 0.47.0")
    assert "default_tools_approval_mode" not in old
    assert "tool_timeout_sec" not in old
    assert old["required"] is True  # 0.47 ignores it (it always waits): one entry shape
    assert "--socket" in tomlkit.dumps({"mcp_servers": {"coven": new}})
    assert supports_approval_mode("0.100.0") and supports_approval_mode(None)
    assert supports_approval_mode("not a version") and not supports_approval_mode("0.47.0")


@pytest.mark.codex
def test_real_codex_accepts_the_entry(codex_bin: Path, codex_version: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    entry = codex_mcp_entry("/tmp/coven.sock", "secret-" * 4, codex_version, tool_timeout=60)
    (home / "config.toml").write_text(tomlkit.dumps({"mcp_servers": {"coven": entry}}))
    shown = subprocess.run(
        [str(codex_bin), "mcp", "get", "coven", "--json"],
        env={**os.environ, "CODEX_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    parsed = json.loads(shown.stdout[shown.stdout.index("{") :])
    assert parsed["transport"]["command"] == sys.executable
    assert parsed["transport"]["args"][-1] == "/tmp/coven.sock"
    assert parsed["startup_timeout_sec"] == 20.0
    assert parsed["tool_timeout_sec"] == 70.0


def test_toolbelt_file(tmp_path: Path) -> None:
    registry = SpellRegistry()
    registry.register(lambda a: a, name="ident")
    path = write_toolbelt(registry, tmp_path / "state" / "toolbelt.json")
    data = json.loads(path.read_text())
    assert data["server"] == "coven"
    assert data["tools"][0]["name"] == "ident"
    assert [p.name for p in path.parent.iterdir()] == ["toolbelt.json"]


def test_spells_command_lists_and_writes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "coven.toml"
    config.write_text('workspace = "ws"\nspells = ["examples.spells_example:spells"]\n')
    (tmp_path / "ws").mkdir()
    monkeypatch.chdir(ROOT)
    assert cli_main(["spells", "--config", str(config), "--write-toolbelt"]) == 0
    out = capsys.readouterr()
    assert "add(a: integer, b: integer) -> text" in out.out
    assert "summarize(numbers: list[number]) -> structured" in out.out
    toolbelt = json.loads((default_state_dir(tmp_path / "ws") / "toolbelt.json").read_text())
    assert {t["name"] for t in toolbelt["tools"]} == {"add", "summarize", "countdown", "divide"}
    assert not (tmp_path / "ws" / ".coven").exists()
    assert (
        cli_main(
            ["spells", "--spells", "examples.spells_example:spells", "--workspace", str(tmp_path / "ws"), "--json"]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["tools"][0]["name"] == "add"


def test_spells_command_errors(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli_main(["spells"]) == 2
    assert "no spells configured" in capsys.readouterr().err
    assert cli_main(["spells", "--spells", "missing_mod_zz:x"]) == 2
    assert "no module named 'missing_mod_zz'" in capsys.readouterr().err
