"""The driver follows from what the installed Codex offers (coven_codex/codex/capabilities.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from coven_codex.codex.capabilities import (
    CAPABILITIES_FILE,
    PROBE_PREFIX,
    CapabilityError,
    CodexCapabilities,
    detect_capabilities,
    plan_driver,
    probe_capabilities,
)
from coven_codex.codex.drivers import unrelayed_approvals
from coven_codex.codex.version import detect_version, parse_version

FAKE_SCHEMA = """#!/bin/sh
echo run >> "$(dirname "$0")/runs"
if [ "$1 $2" != "app-server generate-json-schema" ]; then exit 2; fi
out="$4"
mkdir -p "$out/v2"
echo '{"oneOf": [{"properties": {"method": {"enum": ["thread/start"]}}},
  {"properties": {"method": {"enum": ["thread/resume"]}}}, {"properties": {"method": {"enum": ["turn/start"]}}},
  {"properties": {"method": {"enum": ["turn/interrupt"]}}}]}' > "$out/ClientRequest.json"
echo '{"oneOf": [{"properties": {"method": {"enum": ["item/commandExecution/requestApproval"]}}}]}' \
  > "$out/ServerRequest.json"
echo '{"oneOf": [{"properties": {"method": {"enum": ["turn/started"]}}},
  {"properties": {"method": {"enum": ["turn/completed"]}}}]}' > "$out/ServerNotification.json"
echo '{"properties": {"threadId": {}, "input": {}, "clientUserMessageId": {}}}' > "$out/v2/TurnStartParams.json"
"""


def _fake(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "codex"
    path.write_text(FAKE_SCHEMA)
    path.chmod(0o755)
    return path


def _runs(fake: Path) -> int:
    runs = fake.parent / "runs"
    return len(runs.read_text().splitlines()) if runs.exists() else 0


def test_the_schema_decides_and_is_probed_once_per_binary(tmp_path: Path) -> None:
    fake = _fake(tmp_path / "bin")
    state = tmp_path / "state"
    version = parse_version("codex-cli 9.9.9")
    first = detect_capabilities(fake, (str(fake),), version, env=os.environ, cache_dir=state)
    plan = plan_driver(first)
    assert plan.driver == "app-server" and not plan.steer and not plan.unsubscribe
    assert "turn/start with clientUserMessageId" in plan.reason and "no turn/steer" in plan.reason
    assert plan.approval_requests == {"item/commandExecution/requestApproval"}
    again = detect_capabilities(fake, (str(fake),), version, env=os.environ, cache_dir=state)
    assert again == first and _runs(fake) == 1  # the second start-up read the cache
    cached = json.loads((state / CAPABILITIES_FILE).read_text())
    assert [entry["key"].split(":")[0] for entry in cached["entries"]] == [str(fake.resolve())]
    os.utime(fake, ns=(0, 0))  # another binary at the same path (an upgrade): probed again
    detect_capabilities(fake, (str(fake),), version, env=os.environ, cache_dir=state)
    assert _runs(fake) == 2


KILLED_ONCE = """#!/bin/sh
# Killed by a signal on its first run (as a loaded machine's OOM killer or a stray kill -9 would),
# the real schema after that.
if [ ! -e "$(dirname "$0")/killed" ]; then touch "$(dirname "$0")/killed"; kill -9 $$; fi
"""


def test_a_probe_killed_by_a_signal_is_used_once_and_never_cached(tmp_path: Path) -> None:
    # Before: the kill was cached as "not offered", so every later start ran the exec driver.
    fake = _fake(tmp_path / "bin")
    fake.write_text(KILLED_ONCE + FAKE_SCHEMA.removeprefix("#!/bin/sh\n"))
    state = tmp_path / "state"
    version = parse_version("codex-cli 9.9.9")
    killed = detect_capabilities(fake, (str(fake),), version, env=os.environ, cache_dir=state)
    assert killed.app_server is None and not killed.conclusive
    assert "killed by signal 9" in killed.why_not
    assert not (state / CAPABILITIES_FILE).exists()
    again = detect_capabilities(fake, (str(fake),), version, env=os.environ, cache_dir=state)
    assert again.app_server is not None and again.conclusive and plan_driver(again).driver == "app-server"
    assert (state / CAPABILITIES_FILE).exists()


KILLS_ITS_PROBER = """#!/bin/sh
# On its first run it kills the process probing it (a daemon killed with -9 while it starts) and
# goes on as the orphan it now is: writes the schema, then says it is done.
if [ ! -e "$(dirname "$0")/killed" ]; then touch "$(dirname "$0")/killed"; kill -9 $PPID; fi
"""

PROBER = """
import os, sys
from pathlib import Path
from coven_codex.codex.capabilities import detect_capabilities
from coven_codex.codex.version import parse_version
fake = Path(sys.argv[1])
detect_capabilities(fake, (str(fake),), parse_version("codex-cli 9.9.9"), env=os.environ, cache_dir=Path(sys.argv[2]))
"""


def test_a_probe_killed_with_its_prober_leaves_no_scratch_behind(tmp_path: Path) -> None:
    # Before: the scratch (about 5 MB of schema) was a folder in the system's temporary directory
    # that a daemon killed during its start-up left there for good, one more at every such kill.
    fake = _fake(tmp_path / "bin")
    schema = FAKE_SCHEMA.removeprefix("#!/bin/sh\n")
    fake.write_text(KILLS_ITS_PROBER + schema + 'touch "$(dirname "$0")/done"\n')
    state = tmp_path / "state"
    system_tmp = tmp_path / "tmp"
    system_tmp.mkdir()
    prober = subprocess.run(
        [sys.executable, "-c", PROBER, str(fake), str(state)],
        env={**os.environ, "TMPDIR": str(system_tmp)},
        check=False,
    )
    assert prober.returncode == -signal.SIGKILL
    done = fake.parent / "done"
    deadline = time.monotonic() + 30
    while not done.exists():  # the orphaned probe finishes writing into its scratch
        assert time.monotonic() < deadline, "the orphaned probe never finished"
        time.sleep(0.02)
    abandoned = [p.name for p in state.iterdir() if p.name.startswith(PROBE_PREFIX)]
    assert len(abandoned) == 1 and not list(system_tmp.iterdir())
    running = state / f"{PROBE_PREFIX}{os.getpid()}-probing"  # a live prober's (validate's, say)
    running.mkdir()
    found = detect_capabilities(fake, (str(fake),), parse_version("codex-cli 9.9.9"), env=os.environ, cache_dir=state)
    assert found.conclusive and (state / CAPABILITIES_FILE).exists()
    assert [p.name for p in state.iterdir() if p.name.startswith(PROBE_PREFIX)] == [running.name]
    # Killed after another prober had cached the result: removed by the next start, which probes nothing.
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    (state / f"{PROBE_PREFIX}{int(gone.stdout)}-killed").mkdir()
    detect_capabilities(fake, (str(fake),), parse_version("codex-cli 9.9.9"), env=os.environ, cache_dir=state)
    assert _runs(fake) == 2  # (the killed probe and the one that cached)
    assert [p.name for p in state.iterdir() if p.name.startswith(PROBE_PREFIX)] == [running.name]


def test_a_corrupt_cache_is_probed_again(tmp_path: Path) -> None:
    fake = _fake(tmp_path / "bin")
    state = tmp_path / "state"
    state.mkdir()
    (state / CAPABILITIES_FILE).write_text("{not json")
    found = detect_capabilities(fake, (str(fake),), parse_version("codex-cli 9.9.9"), env=os.environ, cache_dir=state)
    assert found.app_server is not None and _runs(fake) == 1


def test_a_protocol_without_client_ids_gets_exec_and_forcing_app_server_names_what_is_missing() -> None:
    capabilities = CodexCapabilities.model_validate(
        {
            "version": "0.135.0",
            "app_server": {
                "client_requests": ["thread/start", "thread/resume", "turn/start", "turn/interrupt", "turn/steer"],
                "server_requests": [],
                "notifications": ["turn/started", "turn/completed"],
                "turn_start_fields": ["threadId", "input"],
            },
        }
    )
    plan = plan_driver(capabilities)
    assert plan.driver == "exec" and "clientUserMessageId" in plan.reason
    assert plan_driver(capabilities, "exec").driver == "exec"
    with pytest.raises(CapabilityError, match="lacks turn/start's clientUserMessageId"):
        plan_driver(capabilities, "app-server")


@pytest.mark.codex
@pytest.mark.parametrize(
    ("version", "driver", "why"),
    [
        ("0.47.0", "exec", "generate-json-schema"),
        ("0.135.0", "exec", "lacks turn/start's clientUserMessageId"),
        ("0.147.0", "app-server", "turn/steer"),
        ("0.169.0", "app-server", "turn/steer"),
    ],
)
def test_real_clis(version: str, driver: str, why: str, codex_of: Callable[[str], Path], tmp_path: Path) -> None:
    executable = codex_of(version)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    capabilities = probe_capabilities((str(executable),), detect_version(executable, env=env), env=env)
    plan = plan_driver(capabilities)
    assert (plan.driver, plan.steer) == (driver, driver == "app-server")
    assert why in plan.reason
    assert not list(tmp_path.iterdir())  # nothing written to HOME: the probe's CODEX_HOME is a scratch folder


def test_approval_requests_the_driver_does_not_relay_are_named() -> None:
    protocol = {
        "client_requests": ["thread/start", "thread/resume", "turn/start", "turn/interrupt"],
        "server_requests": ["item/commandExecution/requestApproval", "item/permissions/requestApproval"],
        "notifications": ["turn/started", "turn/completed"],
        "turn_start_fields": ["clientUserMessageId"],
    }
    plan = plan_driver(CodexCapabilities.model_validate({"version": "0.169.0", "app_server": protocol}))
    assert unrelayed_approvals(plan) == ["item/permissions/requestApproval"]
