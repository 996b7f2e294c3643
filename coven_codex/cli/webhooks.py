"""``coven-codex webhooks``: send every turn's end to the configured URLs (docs/webhooks.md).

The same senders as ``[webhooks] in_daemon`` runs inside the daemon, as a process of their own:
targets from ``--config`` (``[[webhooks.targets]]``) and/or one given with ``--url``. Runs until
SIGINT or SIGTERM; a delivery under way is sent again at the next start, with the same
idempotency key.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

from coven_codex.journal import JournalError
from coven_codex.journal.opening import (
    JournalName,
    JournalOptions,
    connected,
    describe_journal,
    is_redis_name,
    journal_name,
    open_journal,
)
from coven_codex.settings import SettingsError, load_settings
from coven_codex.support.statelock import StateError
from coven_codex.webhooks.config import WebhookConfigError, WebhookTarget, ready_targets
from coven_codex.webhooks.service import webhook_senders

HELP = "POST every turn's end to webhook URLs ([[webhooks.targets]] of coven.toml, or --url), signed and retried"


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``webhooks`` command's options to ``parser``."""
    parser.add_argument(
        "--journal",
        type=journal_name,
        help="the journal the daemon writes, a path or a redis:// URL (default: journal of --config)",
    )
    parser.add_argument("--config", type=Path, help="coven.toml whose [[webhooks.targets]] to send to")
    parser.add_argument("--url", help="one more target: the URL to POST to")
    parser.add_argument("--name", help="--url's name, which names its saved cursor (default: host and digest)")
    parser.add_argument(
        "--secret-env", help="--url's shared secret: the environment variable holding it (default COVEN_WEBHOOK_SECRET)"
    )
    parser.add_argument("--secret-file", type=Path, help="--url's shared secret: a file holding it")
    parser.add_argument("--format", choices=["json", "cloudevents"], help="--url's body (default json)")
    parser.add_argument("--timeout", type=float, help="--url: seconds one attempt may take (default 10)")
    parser.add_argument("--max-delay", type=float, help="--url: longest wait between attempts (default 300)")
    parser.add_argument(
        "--start",
        choices=["end", "beginning"],
        help="--url's first run: turns that end from now on (end, the default) or every turn in the journal",
    )


def execute(args: argparse.Namespace) -> int:
    """Run the senders until SIGINT/SIGTERM; 2 for bad options or settings, 1 if they cannot start."""
    try:
        journal, targets, cwd = _plan(args)
        ready = ready_targets(targets, dict(os.environ))
    except (SettingsError, WebhookConfigError, ValueError) as exc:
        print(f"coven-codex webhooks: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(_serve(journal, ready, cwd))
    except (StateError, JournalError) as exc:
        print(f"coven-codex webhooks: {exc}", file=sys.stderr)
        return 1
    return 0


def _plan(args: argparse.Namespace) -> tuple[JournalName, list[WebhookTarget], str | None]:
    settings = load_settings(args.config) if args.config is not None else None
    targets = list(settings.webhooks.targets) if settings is not None else []
    if args.url is not None:
        fields: dict[str, Any] = {
            "url": args.url,
            "name": args.name,
            "secret_env": args.secret_env,
            "secret_file": args.secret_file,
            "format": args.format,
            "timeout": args.timeout,
            "max_delay": args.max_delay,
            "start": args.start,
        }
        try:
            targets.append(WebhookTarget.model_validate({k: v for k, v in fields.items() if v is not None}))
        except ValueError as exc:
            raise WebhookConfigError(_first_problem(exc)) from None
    elif any(getattr(args, key) is not None for key in ("name", "secret_env", "secret_file", "format", "timeout")):
        raise WebhookConfigError("--name, --secret-env, --secret-file, --format and --timeout describe --url; add it")
    if not targets:
        raise WebhookConfigError("no webhook to send to: pass --url URL, or --config with [[webhooks.targets]]")
    journal = args.journal or (settings.journal if settings is not None else None)
    if journal is None:
        raise WebhookConfigError("no journal: pass --journal PATH (the daemon's), or --config with journal = ...")
    if not is_redis_name(journal) and not Path(journal).parent.is_dir():
        raise WebhookConfigError(
            f"the journal's folder {Path(journal).parent} does not exist; pass the daemon's --journal"
        )
    workspace = settings.workspace if settings is not None and "workspace" in settings.model_fields_set else None
    return journal, targets, str(workspace.expanduser().resolve()) if workspace is not None else None


def _first_problem(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        return f"--{where.replace('_', '-')}: {first['msg']}" if where else str(first["msg"])
    return str(exc)


async def _serve(journal_path: JournalName, targets: list[Any], cwd: str | None) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    # (a Redis journal that is unreachable or misconfigured fails now, saying what to fix)
    journal = await connected(open_journal(journal_path, JournalOptions(follow_replacement=False)))
    try:
        failures: list[BaseException] = []

        def fatal(failure: BaseException) -> None:
            failures.append(failure)
            stop.set()

        async with webhook_senders(journal, targets, default_cwd=cwd, on_fatal=fatal):
            print(
                f"coven-codex webhooks: sending the turns of {describe_journal(journal_path)}"
                f" to {len(targets)} target(s)",
                flush=True,
            )
            await stop.wait()
        if failures:
            raise failures[0]  # (a JournalError: printed as one message, exit 1)
    finally:
        await journal.aclose()
