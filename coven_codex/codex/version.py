"""The installed Codex CLI's version, and the config details that depend on it.

``codex --version`` prints a line like ``codex-cli 0.169.0``. :func:`detect_version` runs it
with a timeout (5 s by default) and :func:`parse_version` turns the output into a
:class:`CodexVersion`. The driver is *not* decided here: it follows from what the installed
binary's protocol offers (:mod:`coven_codex.codex.capabilities`). What remains here are config
keys no protocol description tells about: ``default_tools_approval_mode`` for MCP servers
(unknown to 0.47.0, needed on 0.169.0) and the OpenTelemetry exporters.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import total_ordering
from pathlib import Path

from coven_codex.codex.process import run_captured

VERSION_TIMEOUT = 5.0
LAST_WITHOUT_TOOLS_APPROVAL_MODE = (0, 47, 0)
OLDEST_SUPPORTED = (0, 47, 0)
VERIFIED_OTEL_LOGS = (0, 47, 0)
VERIFIED_OTEL_TRACES = (0, 169, 0)

_VERSION_RE = re.compile(r"(?:^|\s)v?(\d+)\.(\d+)\.(\d+)(?:[-+.]([0-9A-Za-z.\-+]+))?(?=\s|$)")


class VersionError(RuntimeError):
    """The version could not be determined; the message says what to do."""


@total_ordering
@dataclass(frozen=True, slots=True)
class CodexVersion:
    """A Codex CLI version as ``codex --version`` printed it; ordered by ``(major, minor, patch)``."""

    major: int
    minor: int
    patch: int
    raw: str = ""  # the whole ``--version`` output line, for messages
    suffix: str = ""  # pre-release / build suffix, e.g. "alpha.3"

    @property
    def triple(self) -> tuple[int, int, int]:
        """``(major, minor, patch)``, without the suffix."""
        return (self.major, self.minor, self.patch)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, CodexVersion):
            return NotImplemented
        return self.triple < other.triple

    def __str__(self) -> str:
        base = f"{self.major}.{self.minor}.{self.patch}"
        return f"{base}-{self.suffix}" if self.suffix else base

    def at_least(self, triple: tuple[int, int, int]) -> bool:
        """This version is ``triple`` or newer (the suffix is ignored)."""
        return self.triple >= triple

    @property
    def supports_tools_approval_mode(self) -> bool:
        """``[mcp_servers.X] default_tools_approval_mode`` should be written.

        Verified understood (and needed) on 0.169.0 and unknown to 0.47.0; versions in between
        get it too, because Codex ignores config keys it does not know.
        """
        return self.triple > LAST_WITHOUT_TOOLS_APPROVAL_MODE

    @property
    def supports_otel_logs(self) -> bool:
        """``[otel] exporter`` posts log records over OTLP/HTTP (verified on 0.47.0 and 0.169.0)."""
        return self.at_least(VERIFIED_OTEL_LOGS)

    @property
    def supports_otel_traces(self) -> bool:
        """``[otel] trace_exporter`` posts spans over OTLP/HTTP (verified on 0.169.0; 0.47.0 ignores the key)."""
        return self.at_least(VERIFIED_OTEL_TRACES)

    @property
    def supported(self) -> bool:
        """At least the oldest version the bridge was verified with."""
        return self.at_least(OLDEST_SUPPORTED)


def parse_version(output: str) -> CodexVersion:
    """Parse ``codex --version`` output (``codex-cli 0.169.0``); raise :class:`VersionError`."""
    for line in output.splitlines():
        match = _VERSION_RE.search(line.strip())
        if match:
            major, minor, patch, suffix = match.groups()
            return CodexVersion(int(major), int(minor), int(patch), raw=line.strip(), suffix=suffix or "")
    shown = " ".join(output.split())[:120] or "(nothing)"
    raise VersionError(
        f"cannot read a version from `codex --version` output: {shown}; check that codex_path "
        "points at the OpenAI Codex CLI"
    )


def detect_version(
    executable: Path,
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = VERSION_TIMEOUT,
    command: Sequence[str] = (),
) -> CodexVersion:
    """Run ``<executable> --version`` (with ``timeout``) and parse it; ``command`` (default:
    ``executable`` alone) is what starts Codex (:class:`coven_codex.codex.launch.CodexLaunch`).

    Even ``--version`` makes Codex write helper links under ``$CODEX_HOME/tmp``, so it runs with
    ``CODEX_HOME`` set to a scratch folder, removed afterwards: the user's ``~/.codex`` is never
    written to."""
    with tempfile.TemporaryDirectory(prefix="coven-version-") as scratch:
        try:
            done = run_captured(
                [*(command or (str(executable),)), "--version"],
                env={**(os.environ if env is None else env), "CODEX_HOME": scratch},
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            raise VersionError(
                f"`{executable} --version` did not answer within {timeout:.0f}s; check the installation"
            ) from None
        except OSError as exc:
            raise VersionError(f"cannot run `{executable} --version`: {exc}; check the installation") from None
    if done.returncode != 0:
        detail = " ".join((done.stderr or done.stdout).split())[:160]
        raise VersionError(f"`{executable} --version` failed with exit {done.returncode}: {detail}; reinstall Codex")
    return parse_version(done.stdout)
