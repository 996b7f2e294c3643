"""``scripts/demo.sh`` runs ``scripts/setup.sh`` first: on a set-up machine it says nothing."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_setup_on_a_ready_machine_prints_no_codex_paths() -> None:
    done = subprocess.run(
        [str(ROOT / "scripts" / "setup.sh")], cwd=ROOT, capture_output=True, text=True, timeout=600, check=True
    )
    output = done.stdout + done.stderr
    assert not [line for line in output.splitlines() if line.startswith(("0.169.0 ", "0.47.0 "))], output
