"""scripts/install-npm-pinned.sh: the one installer of the pinned npm packages (the TypeScript MCP
SDK, the MCP Inspector), each into its own ignored folder, whose path it prints."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "install-npm-pinned.sh"


def test_the_installer_prints_the_folder_of_the_pinned_package() -> None:
    done = subprocess.run([str(SCRIPT), "mcp-sdk-js"], capture_output=True, text=True, timeout=300, check=True)
    folder = Path(done.stdout.strip())
    assert folder == ROOT / ".mcp-sdk-js"
    manifest = json.loads((folder / "node_modules" / "@modelcontextprotocol" / "sdk" / "package.json").read_text())
    assert f"version={manifest['version']}" in SCRIPT.read_text()


def test_the_installer_refuses_a_name_it_does_not_pin_with_its_usage() -> None:
    done = subprocess.run([str(SCRIPT), "left-pad"], capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout) == (2, "")
    assert "usage:" in done.stderr
    assert "mcp-sdk-js|mcp-inspector" in done.stderr
