"""validate's Codex probes: pass and fail cases, each within its bound."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coven_codex.codex.capabilities import CAPABILITIES_FILE
from coven_codex.settings import Settings
from coven_codex.validate import codex_probes
from coven_codex.validate.framework import ProbeContext, Status, run_plan
from coven_codex.validate.plan import PLAN
from tests.conftest import codex_binary

CREDENTIAL_VARIABLES = ("OPENAI_API_KEY", "CODEX_API_KEY", "AZURE_OPENAI_API_KEY", "CODEX_HOME")


@pytest.fixture(autouse=True)
def _no_user_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in CREDENTIAL_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def _context(workspace: Path, **settings: object) -> ProbeContext:
    return ProbeContext(settings=Settings.model_validate({"workspace": workspace, **settings}))


def _fake_codex(folder: Path, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "codex"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize(
    ("version", "says"),
    [
        ("0.169.0", "driver app-server: its protocol has everything the driver uses"),
        ("0.147.0", "driver app-server: its protocol has everything the driver uses"),
        ("0.135.0", "driver exec: Codex 0.135.0's app-server lacks turn/start's clientUserMessageId"),
        ("0.47.0", "driver exec: Codex 0.47.0 does not describe an app-server protocol"),
    ],
)
async def test_real_codex_is_found_and_its_driver_chosen(tmp_path: Path, version: str, says: str) -> None:
    context = _context(tmp_path, codex_path=str(codex_binary(version)))
    assert (await codex_probes.probe_codex_found(context)).status is Status.PASS
    found_version = await codex_probes.probe_codex_version(context)
    assert found_version.status is Status.PASS and version in found_version.detail
    supported = await codex_probes.probe_codex_supported(context)
    assert supported.status is Status.PASS
    assert says in supported.detail  # the driver and why
    # The decision is cached in the state directory (never the workspace) for the next start.
    assert (context.settings.resolved_state_dir / CAPABILITIES_FILE).is_file()
    assert not (tmp_path / CAPABILITIES_FILE).exists()


async def test_forcing_app_server_on_an_old_codex_fails(tmp_path: Path) -> None:
    context = _context(tmp_path, codex_path=str(codex_binary("0.47.0")), driver="app-server")
    await codex_probes.probe_codex_found(context)
    await codex_probes.probe_codex_version(context)
    result = await codex_probes.probe_codex_supported(context)
    assert result.status is Status.FAIL and "upgrade" in result.fix.lower()
    assert "generate-json-schema" in result.detail  # what the binary lacks


async def test_missing_codex_fails_with_install_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    result = await codex_probes.probe_codex_found(_context(tmp_path, codex_path="codex"))
    assert result.status is Status.FAIL
    assert "npm install -g @openai/codex" in result.fix


async def test_codex_with_a_path_like_name_is_refused(tmp_path: Path) -> None:
    result = await codex_probes.probe_codex_found(_context(tmp_path, codex_path="codex;rm"))
    assert result.status is Status.FAIL and "plain executable name" in result.detail


async def test_codex_inside_the_workspace_is_refused(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    inside = _fake_codex(workspace / "bin", "echo codex-cli 0.169.0")
    result = await codex_probes.probe_codex_found(_context(workspace, codex_path=str(inside)))
    assert result.status is Status.FAIL
    assert "inside the workspace" in result.detail and "outside the workspace" in result.fix


async def test_codex_on_path_inside_the_workspace_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    workspace = tmp_path / "ws"
    _fake_codex(workspace / "node_modules" / ".bin", "echo codex-cli 0.169.0")
    monkeypatch.setenv("PATH", str(workspace / "node_modules" / ".bin"))
    result = await codex_probes.probe_codex_found(_context(workspace))
    assert result.status is Status.FAIL and "inside the workspace" in result.detail


async def test_a_version_that_hangs_fails_within_its_bound(tmp_path: Path) -> None:
    hanging = _fake_codex(tmp_path / "bin", "sleep 60")
    context = _context(tmp_path / "ws", codex_path=str(hanging))
    (tmp_path / "ws").mkdir()
    plan = [probe for probe in PLAN if probe.code in ("codex_found", "codex_version", "codex_supported")]
    started = time.monotonic()
    outcomes = await run_plan(plan, context)
    elapsed = time.monotonic() - started
    assert [o.result.status for o in outcomes] == [Status.PASS, Status.FAIL, Status.SKIP]
    assert "did not answer within 5s" in outcomes[1].result.detail
    assert elapsed < plan[1].timeout + 1


async def test_a_login_check_that_hangs_is_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codex_probes, "LOGIN_TIMEOUT", 0.5)
    (tmp_path / "ws").mkdir()
    context = _context(tmp_path / "ws", codex_path=str(_fake_codex(tmp_path / "bin", "sleep 60")))
    assert (await codex_probes.probe_codex_found(context)).status is Status.PASS
    started = time.monotonic()
    result = await codex_probes.probe_login(context)
    assert time.monotonic() - started < 3
    assert result.status is Status.WARN and "no answer" in result.detail


async def test_not_logged_in_is_a_warning_with_the_fix(tmp_path: Path) -> None:
    context = _context(tmp_path, codex_path=str(codex_binary("0.169.0")))
    await codex_probes.probe_codex_found(context)
    result = await codex_probes.probe_login(context)
    assert result.status is Status.WARN
    assert "Not logged in" in result.detail and "codex login" in result.fix


async def test_not_logged_in_with_an_api_key_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-shown")
    context = _context(tmp_path, codex_path=str(codex_binary("0.169.0")))
    await codex_probes.probe_codex_found(context)
    result = await codex_probes.probe_login(context)
    assert result.status is Status.PASS
    assert "$OPENAI_API_KEY will be used" in result.detail and "sk-test" not in result.detail


async def test_no_credentials_fails(tmp_path: Path) -> None:
    result = await codex_probes.probe_credentials(_context(tmp_path))
    assert result.status is Status.FAIL and "codex login" in result.fix


async def test_api_key_counts_as_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-shown")
    result = await codex_probes.probe_credentials(_context(tmp_path))
    assert result.status is Status.PASS
    assert "$OPENAI_API_KEY" in result.detail and "sk-test" not in result.detail


async def test_user_auth_json_counts_as_credentials(tmp_path: Path) -> None:
    codex_dir = Path(os.environ["HOME"]) / ".codex"
    codex_dir.mkdir()
    (codex_dir / "auth.json").write_text("{}")
    assert (await codex_probes.probe_credentials(_context(tmp_path))).status is Status.PASS


async def test_offline_provider_counts_when_its_key_is_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    provider = {
        "model_provider": "local",
        "model_providers": {
            "local": {
                "name": "local",
                "base_url": "http://127.0.0.1:9/v1",
                "wire_api": "responses",
                "env_key": "LOCAL_KEY",
            }
        },
    }
    missing = await codex_probes.probe_credentials(_context(tmp_path, codex=provider))
    assert missing.status is Status.FAIL and "LOCAL_KEY" in missing.detail
    monkeypatch.setenv("LOCAL_KEY", "anything")
    assert (await codex_probes.probe_credentials(_context(tmp_path, codex=provider))).status is Status.PASS


async def test_broken_base_config_fails_the_merge(tmp_path: Path) -> None:
    base = tmp_path / "base.toml"
    base.write_text('model = "gpt"\n[broken\n')
    result = await codex_probes.probe_config_merge(_context(tmp_path, codex_config=base))
    assert result.status is Status.FAIL
    assert "not valid TOML" in result.detail and str(base) in result.fix


async def test_config_merge_keeps_the_user_config_and_leaves_nothing(tmp_path: Path) -> None:
    base = tmp_path / "base.toml"
    base.write_text('# my settings\nmodel = "gpt-5"\n[tui]\nnotifications = true\n')
    before = set(tmp_path.iterdir())
    result = await codex_probes.probe_config_merge(_context(tmp_path, codex_config=base))
    assert result.status is Status.PASS, result
    assert set(tmp_path.iterdir()) == before
    assert not (tmp_path / ".codex").exists()


def test_validate_command_json_passes_on_an_offline_setup(tmp_path: Path) -> None:
    """The whole preflight as a user runs it: every required check passes, exit 0."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    config = tmp_path / "coven.toml"
    config.write_text(
        f'workspace = "{workspace}"\njournal = "{tmp_path / "journal.jsonl"}"\n'
        f'codex_path = "{codex_binary("0.169.0")}"\nspells = ["examples.spells_example:spells"]\n'
        '[codex]\nmodel = "m"\nmodel_provider = "local"\n'
        '[codex.model_providers.local]\nname = "local"\nbase_url = "http://127.0.0.1:9/v1"\n'
        'wire_api = "responses"\nenv_key = "COVEN_LOCAL_KEY"\n'
    )
    env = {**os.environ, "COVEN_LOCAL_KEY": "x"}
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "coven_codex", "validate", "--config", str(config), "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=60,
        check=False,
    )
    report = json.loads(done.stdout)
    failed = [c for c in report["checks"] if c["status"] == "fail"]
    assert done.returncode == 0, failed
    assert report["ok"] is True
    assert {c["code"] for c in report["checks"]} >= {"codex_found", "shim_handshake", "config_merge", "spells"}
    broken = config.read_text().replace('codex_path = "', 'codex_path = "/nonexistent')
    config.write_text(broken)
    done = subprocess.run(
        [sys.executable, "-m", "coven_codex", "validate", "--config", str(config)],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "NOT READY" in done.stdout and "codex_found" in done.stdout


@pytest.mark.parametrize(
    ("version", "collect", "status", "detail"),
    [
        ("0.169.0", True, "pass", "exports logs and traces"),
        ("0.47.0", True, "warn", "exports only log records"),
        ("0.46.0", True, "warn", "exports no OpenTelemetry data"),
        ("0.47.0", False, "pass", "trace capture is off"),
    ],
)
async def test_the_traces_check_says_what_this_version_exports(
    tmp_path: Path, version: str, collect: bool, status: str, detail: str
) -> None:
    from coven_codex.codex.version import parse_version

    context = _context(tmp_path, collect_traces=collect)
    context.facts[codex_probes.VERSION_FACT] = parse_version(f"codex-cli {version}")
    result = await codex_probes.probe_traces(context)
    assert result.status == status
    assert detail in result.detail
