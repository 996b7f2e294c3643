"""``coven-codex slack``: the Slack chat adapter (``pip install 'coven-codex[slack]'``; docs/adapters.md)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from coven_codex.adapters.kit.config import AdapterConfigError, SlackSection
from coven_codex.adapters.kit.platform import PlatformError
from coven_codex.adapters.kit.runner import cursor_name
from coven_codex.cli.options import JOURNAL_METAVAR, journal_argument, load_adapter_start
from coven_codex.cli.stopping import signals_cancel

HELP = "the Slack chat adapter on a journal ([adapters.slack] in coven.toml; the daemon must be running)"


def configure(parser: argparse.ArgumentParser) -> None:
    """The command's options."""
    parser.add_argument("--config", type=Path, required=True, help="coven.toml with an [adapters.slack] section")
    parser.add_argument(
        "--journal",
        type=journal_argument,
        metavar=JOURNAL_METAVAR,
        default=None,
        help="the journal (default: the one coven.toml names)",
    )


def _fail(message: str) -> int:
    print(f"coven-codex slack: {message}", file=sys.stderr)
    return 2


def execute(args: argparse.Namespace) -> int:
    """Check the configuration and tokens, then run the adapter until SIGINT or SIGTERM."""
    try:
        from coven_codex.adapters.slack.platform import SlackIdentity, SlackRun, run_slack  # noqa: PLC0415 ([slack])
    except ModuleNotFoundError as exc:
        if exc.name not in ("slack_bolt", "slack_sdk", "aiohttp"):
            raise
        return _fail(f"{exc.name} is not installed; install the Slack extra: pip install 'coven-codex[slack]'")
    try:
        section, journal, secrets = load_adapter_start(
            "slack", args.config, args.journal, "docs/adapters.md: where to find the ids"
        )
        assert isinstance(section, SlackSection)
    except AdapterConfigError as exc:
        return _fail(str(exc))
    print(f"coven-codex slack: {section.access_policy().describe()}", file=sys.stderr, flush=True)

    async def started(identity: SlackIdentity) -> None:
        """Say who the bot is and which journal it follows (tests and service logs wait for this line)."""
        print(
            f"coven-codex slack: connected as {identity.user_id} in {identity.team_id} ({section.mode} mode);"
            f" following {journal} (cursor '{cursor_name('slack')}')",
            file=sys.stderr,
            flush=True,
        )

    async def main() -> None:
        """Run the adapter; SIGINT and SIGTERM cancel it (a clean exit)."""
        task = asyncio.current_task()
        assert task is not None
        async with signals_cancel(task):
            await run_slack(SlackRun(section, secrets, journal), started)

    try:
        asyncio.run(main())
    except asyncio.CancelledError:
        return 0
    except PlatformError as exc:
        print(f"coven-codex slack: {exc}", file=sys.stderr)
        return 1
    return 0
