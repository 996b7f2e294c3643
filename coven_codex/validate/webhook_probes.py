"""Probes of each webhook target of ``coven.toml`` (``[[webhooks.targets]]``, docs/webhooks.md).

For every target, two checks: its URL (``https``, or ``http`` to this machine; plain ``http``
elsewhere is a warning: the payload holds the conversation's messages), and its shared secret
(present, long enough, never printed; a secret file others may read is a warning). The sender
runs the same checks at start-up (:mod:`coven_codex.webhooks.config`), so ``validate`` refuses
what ``run`` with ``[webhooks] in_daemon`` and ``coven-codex webhooks`` would refuse.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

from coven_codex.settings import Settings
from coven_codex.validate.framework import Probe, ProbeContext, ProbeFunction, ProbeResult
from coven_codex.webhooks.config import WebhookConfigError, WebhookTarget, check_url


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _url(target: WebhookTarget) -> ProbeFunction:
    async def probe(context: ProbeContext) -> ProbeResult:
        """Whether the URL is one the sender can post to, and privately."""
        try:
            parts = check_url(target.url)
        except WebhookConfigError as exc:
            return ProbeResult.fail(str(exc), "Fix url in [[webhooks.targets]] of coven.toml.")
        host = parts.hostname or ""
        if parts.scheme == "http" and not _loopback(host):
            return ProbeResult.warn(
                f"http://{host[:60]}: the payloads (the conversation's messages) and their signatures cross the"
                " network unencrypted",
                "Use an https:// URL (the signature proves who sent a request, it does not hide it).",
            )
        return ProbeResult.ok(f"{parts.scheme}://{host[:60]}, {target.format}, timeout {target.timeout:g} s")

    return probe


def _secret(target: WebhookTarget) -> ProbeFunction:
    async def probe(context: ProbeContext) -> ProbeResult:
        """Whether the shared secret is present and long enough (its value is never shown)."""
        try:
            target.load_secret(dict(os.environ))
        except WebhookConfigError as exc:
            return ProbeResult.fail(str(exc), "Set the secret as the message says, then run validate again.")
        how, where = target.secret_source()
        if how == "file" and _readable_by_others(Path(where)):
            return ProbeResult.warn(
                f"present, but other users of this machine may read secret_file {where}",
                "chmod 600 the file (or 640 with a group only the service's user is in).",
            )
        return ProbeResult.ok(f"present, from {'$' if how == 'env' else 'secret_file '}{where}")

    return probe


def _readable_by_others(path: Path) -> bool:
    try:
        return bool(path.stat().st_mode & 0o007)
    except OSError:
        return False


def webhook_plan(settings: Settings) -> tuple[Probe, ...]:
    """The probes of every webhook target in ``settings`` (none when ``[webhooks]`` has none)."""
    probes: list[Probe] = []
    for target in settings.webhooks.targets:
        name = target.target_name
        probes += [
            Probe(f"webhook_{name}_url", f"webhook {name}: URL", _url(target), timeout=1),
            Probe(f"webhook_{name}_secret", f"webhook {name}: shared secret present", _secret(target), timeout=5),
        ]
    return tuple(probes)
