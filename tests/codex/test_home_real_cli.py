"""The CODEX_HOME that coven prepares works with the real CLIs (both versions): the user's
base config with comments, coven's MCP entry, trust entry and approval defaults, AGENTS.md."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import tomlkit
from codex_driver_helpers import Recorder, driver_plan, thought

from coven_codex.codex.drivers import DriverSettings, TurnFinished, create_driver
from coven_codex.codex.home import prepare_codex_home
from coven_codex.codex.version import detect_version
from coven_codex.testing import CallTool, Reply, ScriptedModelServer, TurnScript, codex_config
from coven_codex.testing.codex_config import DEFAULT_ENV_KEY
from coven_codex.testing.mcp_echo_server import mcp_server_entry

pytestmark = pytest.mark.codex


async def test_prepared_home_runs_tools_and_instructions(tmp_path: Path, codex_bin: Path, recorder: Recorder) -> None:
    script: list[TurnScript] = [CallTool("echo.echo", {"text": "via the merged config"}), Reply("done")]
    async with ScriptedModelServer(script) as server:
        base = tmp_path / "base.toml"
        config = codex_config(server.base_url)
        config.pop("approval_policy")
        base.write_text("# my own Codex settings\n" + tomlkit.dumps(config) + "# trailing comment\n")
        template = tmp_path / "agents.md"
        template.write_text("Always answer for team $TEAM in $WORKSPACE_DIR.\n")
        workspace = tmp_path / "ws"
        workspace.mkdir()
        version = detect_version(codex_bin, env={"HOME": str(tmp_path), "PATH": os.environ["PATH"]})
        plan = driver_plan(codex_bin, version)
        home = prepare_codex_home(
            workspace / ".codex",
            workspace,
            driver=plan.driver,
            base_config=base,
            owned_tables={("mcp_servers", "echo"): mcp_server_entry()},
            agents_template=template,
            agents_vars={"TEAM": "blue"},
            environ={"HOME": str(tmp_path / "user"), "PATH": os.environ["PATH"], DEFAULT_ENV_KEY: "k"},
        )
        text = home.config_path.read_text()
        assert "# my own Codex settings" in text and "# trailing comment" in text
        driver = create_driver(
            codex_bin,
            version,
            workspace,
            env=home.env,
            settings=DriverSettings(kill_grace=3.0),
            sink=recorder,
            plan=plan,
        )
        try:
            await driver.start(None)
            await driver.submit(thought("use the tool", "t1"))
            (finished,) = await recorder.wait_for(TurnFinished)
        finally:
            await driver.aclose()
        assert finished.ok, finished.error
        outputs = server.requests.function_call_outputs()
        assert outputs and "echo: via the merged config" in outputs[0].output
        first = json.dumps(server.requests.responses_requests()[0].json)
        assert f"Always answer for team blue in {workspace.resolve()}." in first
