"""Probes of each chat adapter configured in ``coven.toml`` (``[adapters.<name>]``, docs/adapters.md).

For every configured adapter, three checks: its library is importable (the pip extra is
installed), its tokens are present and well-formed (never printed), and its allow-lists let
somebody in. The adapter itself runs the same checks at start-up
(:mod:`coven_codex.adapters.kit.config`), so ``validate`` refuses what the adapter would refuse.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from pathlib import Path

from coven_codex.adapters.kit.config import AdapterConfigError, AdapterSection
from coven_codex.settings import Settings
from coven_codex.support.secret import Secret
from coven_codex.validate.framework import Probe, ProbeContext, ProbeFunction, ProbeResult


def _library(section: AdapterSection) -> ProbeFunction:
    async def probe(context: ProbeContext) -> ProbeResult:
        """Whether the adapter's library imports."""
        try:
            await asyncio.to_thread(importlib.import_module, section.LIBRARY)
        except ImportError as exc:
            return ProbeResult.fail(
                f"{section.LIBRARY} cannot be imported ({type(exc).__name__}: {str(exc)[:200]})",
                f"Install the adapter's extra: pip install 'coven-codex[{section.EXTRA}]'.",
            )
        return ProbeResult.ok(f"{section.LIBRARY} imports")

    return probe


def _tokens(section: AdapterSection) -> ProbeFunction:
    async def probe(context: ProbeContext) -> ProbeResult:
        """Whether every token the adapter needs is present and well-formed."""
        try:
            secrets = section.load_secrets(dict(os.environ))
        except AdapterConfigError as exc:
            return ProbeResult.fail(str(exc), "Set the token as the message says, then run validate again.")
        loose = [
            f"{kind}_file {where}"
            for kind in secrets
            for how, where in [section.secret_source(kind)]
            if how == "file" and _readable_by_others(Path(where))
        ]
        if loose:
            return ProbeResult.warn(
                f"present and well-formed, but other users of this machine may read {', '.join(loose)}",
                "chmod 600 the file (or 640 with a group only the service's user is in).",
            )
        sources = ", ".join(
            f"{kind} from {'$' if how == 'env' else ''}{where}"
            for kind in secrets
            for how, where in [section.secret_source(kind)]
        )
        return ProbeResult.ok(f"present and well-formed: {sources}")

    return probe


def _readable_by_others(path: Path) -> bool:
    try:
        return bool(path.stat().st_mode & 0o007)
    except OSError:
        return False


def _access(section: AdapterSection) -> ProbeFunction:
    async def probe(context: ProbeContext) -> ProbeResult:
        """Whether the allow-lists let somebody in."""
        problems = section.access_problems()
        if problems:
            return ProbeResult.fail(
                "; ".join(problems), "List the ids in coven.toml (docs/adapters.md says where to find them)."
            )
        return ProbeResult.ok(section.access_policy().describe())

    return probe


def _token_and_url(section: AdapterSection) -> tuple[Secret, str | None] | ProbeResult:
    """The section's ``token`` and its ``api_url`` (if it has one), or the failure to read the token."""
    try:
        secrets = section.load_secrets(dict(os.environ))
    except AdapterConfigError as exc:
        return ProbeResult.fail(str(exc), "Set the token as the message says, then run validate again.")
    api_url = getattr(section, "api_url", None)
    return secrets["token"], api_url if isinstance(api_url, str) else None


def _telegram_reachable(section: AdapterSection) -> ProbeFunction:
    async def probe(context: ProbeContext) -> ProbeResult:
        """Whether Telegram answers ``getMe`` with the token (a warning when it cannot be reached)."""
        from coven_codex.adapters.telegram.platform import reach  # noqa: PLC0415 ([telegram] extra)

        token = _token_and_url(section)
        if isinstance(token, ProbeResult):
            return token
        found = await reach(*token)
        if found.refused:
            return ProbeResult.fail(found.detail, "Copy the token again from @BotFather (/mybots > API Token).")
        if not found.reached:
            return ProbeResult.warn(
                f"Telegram could not be reached ({found.detail})",
                "Check this machine's network (offline: the adapter waits for Telegram when it starts).",
            )
        return ProbeResult.ok(found.detail)

    return probe


def _slack_scopes(section: AdapterSection) -> ProbeFunction:
    async def probe(context: ProbeContext) -> ProbeResult:
        """Whether the Slack bot token has every scope the adapter uses (``auth.test``'s ``x-oauth-scopes``)."""
        from coven_codex.adapters.slack.platform import check_scopes, describe_missing  # noqa: PLC0415 ([slack])

        token = _token_and_url(section)
        if isinstance(token, ProbeResult):
            return token
        found = await check_scopes(*token)
        if found.refused:
            return ProbeResult.fail(found.detail, "Copy the bot token again (OAuth & Permissions).")
        if not found.reached:
            return ProbeResult.warn(found.detail, "Check this machine's network and api_url.")
        if found.missing is None:
            return ProbeResult.warn(
                f"{found.detail}; Slack did not say which scopes the token has",
                "Compare the app's scopes (OAuth & Permissions) with examples/slack-manifest.json.",
            )
        if found.missing:
            return ProbeResult.fail(
                f"the bot token lacks {describe_missing(found.missing)}",
                "Add the scopes under OAuth & Permissions (examples/slack-manifest.json lists them), reinstall"
                " the app, and copy the new bot token.",
            )
        return ProbeResult.ok(f"{found.detail}; every scope the adapter uses is granted")

    return probe


def adapter_plan(settings: Settings) -> tuple[Probe, ...]:
    """The probes of every adapter configured in ``settings`` (none when ``[adapters]`` is absent)."""
    probes: list[Probe] = []
    for section in settings.adapters.configured():
        name = section.PLATFORM
        probes += [
            Probe(f"{name}_library", f"{name} adapter: {section.LIBRARY} importable", _library(section), timeout=20),
            Probe(f"{name}_tokens", f"{name} adapter: tokens present and well-formed", _tokens(section), timeout=5),
            Probe(f"{name}_access", f"{name} adapter: allow-lists let somebody in", _access(section), timeout=1),
        ]
        if name == "slack":
            probes.append(
                Probe(
                    "slack_scopes",
                    "slack adapter: the bot token has every scope the adapter uses",
                    _slack_scopes(section),
                    timeout=20,
                    needs=("slack_library", "slack_tokens"),
                )
            )
        if name == "telegram":
            probes.append(
                Probe(
                    "telegram_reachable",
                    "telegram adapter: getMe answers with the token",
                    _telegram_reachable(section),
                    timeout=20,
                    needs=("telegram_library", "telegram_tokens"),
                )
            )
    return tuple(probes)
