"""The processes a test's Codex left: found by the ``CODEX_HOME`` they inherited."""

from __future__ import annotations

import contextlib
from pathlib import Path

import psutil

from coven_codex.codex.process import processes_with_environ


def _living(process: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return process.status() != psutil.STATUS_ZOMBIE
    return False


def codex_processes(codex_home: Path) -> list[psutil.Process]:
    """Every living process started for ``codex_home`` (Codex and its children inherit CODEX_HOME)."""
    home = str(codex_home)
    return [p for p in processes_with_environ(lambda environ: environ.get("CODEX_HOME") == home) if _living(p)]
