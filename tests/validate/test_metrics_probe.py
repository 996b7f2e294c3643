"""validate's metrics_port check, and run's refusal of a port it cannot listen on."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from coven_codex.settings import Settings, SettingsError, load_settings
from coven_codex.validate.framework import ProbeContext, Status, run_plan
from coven_codex.validate.plan import PLAN, RUN_GATES

PROBE = tuple(probe for probe in PLAN if probe.code == "metrics_port")


async def _run(tmp_path: Path, **settings: Any) -> tuple[Status, str, str]:
    context = ProbeContext(settings=Settings.model_validate({"workspace": tmp_path, **settings}))
    [outcome] = await run_plan(PROBE, context)
    return outcome.result.status, outcome.result.detail, outcome.result.fix


async def test_no_metrics_port_skips_the_check(tmp_path: Path) -> None:
    assert (await _run(tmp_path))[0] is Status.SKIP


async def test_a_free_port_passes_and_names_who_may_connect(tmp_path: Path) -> None:
    status, detail, _ = await _run(tmp_path, metrics_port=0, metrics_allow=["10.0.0.0/8"])
    assert status is Status.PASS and detail.endswith("clients served: loopback, 10.0.0.0/8"), detail


async def test_a_port_in_use_fails_and_run_refuses_it_too(tmp_path: Path) -> None:
    assert "metrics_port" in RUN_GATES
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        status, detail, fix = await _run(tmp_path, metrics_port=port)
        assert status is Status.FAIL and f"cannot listen on 127.0.0.1:{port}" in detail, detail
        assert "metrics_port" in fix
        run = subprocess.run(
            [sys.executable, "-m", "coven_codex", "run", "--workspace", str(tmp_path), "--journal",
             str(tmp_path / "j.jsonl"), "--metrics-port", str(port)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert run.returncode == 2, run.stderr
    assert f"cannot listen on 127.0.0.1:{port} for metrics" in run.stderr


async def test_listening_beyond_loopback_without_allowed_networks_is_warned_about(tmp_path: Path) -> None:
    status, detail, fix = await _run(tmp_path, metrics_port=0, metrics_host="0.0.0.0")
    assert status is Status.WARN and "only loopback clients" in detail and "metrics_allow" in fix


def test_a_metrics_allow_that_is_not_a_network_is_refused_by_name(tmp_path: Path) -> None:
    config = tmp_path / "coven.toml"
    config.write_text('metrics_allow = ["10.0.0.0/8", "the office"]\n')
    with pytest.raises(SettingsError, match=r"metrics_allow: 'the office' is not a network"):
        load_settings(config, {})
