"""The project-installed Codex CLI: the pinned version ``scripts/setup.sh`` puts next to a checkout.

``scripts/install-codex.sh`` installs it into ``<checkout>/.codex-cli/<version>/`` (ignored by
git), so it is on no ``PATH``. :func:`coven_codex.codex.discovery.find_codex` tries it last
when no ``codex_path`` is configured (after ``PATH`` and npm's global prefix: a Codex the user
installed is the user's choice); the offline demo uses it first, as the version it is tested
with. The source it reports is :data:`SOURCE`, so the log and ``validate`` say which is used.
"""

from __future__ import annotations

from pathlib import Path

PINNED_VERSION = "0.169.0"
SOURCE = "project-installed CLI"
CHECKOUT = Path(__file__).resolve().parents[2]


def project_codex(checkout: Path = CHECKOUT) -> Path | None:
    """``<checkout>/.codex-cli/<pinned>/node_modules/.bin/codex`` if it exists, else ``None``."""
    candidate = checkout / ".codex-cli" / PINNED_VERSION / "node_modules" / ".bin" / "codex"
    return candidate if candidate.exists() else None
