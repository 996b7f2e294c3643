"""``coven-codex slack``: the Slack chat adapter (``pip install 'coven-codex[slack]'``; docs/adapters.md)."""

from __future__ import annotations

import argparse
import sys

from coven_codex.adapters.kit.config import AdapterConfigError, SlackSection
from coven_codex.adapters.kit.runner import cursor_name
from coven_codex.cli.options import adapter_refused, add_adapter_options, load_adapter_start, run_adapter

HELP = "the Slack chat adapter on a journal ([adapters.slack] in coven.toml; the daemon must be running)"


def configure(parser: argparse.ArgumentParser) -> None:
    """The command's options."""
    add_adapter_options(parser, "slack")


def execute(args: argparse.Namespace) -> int:
    """Check the configuration and tokens, then run the adapter until SIGINT or SIGTERM."""
    try:
        from coven_codex.adapters.slack.platform import SlackIdentity, SlackRun, run_slack  # noqa: PLC0415 ([slack])
    except ModuleNotFoundError as exc:
        if exc.name not in ("slack_bolt", "slack_sdk", "aiohttp"):
            raise
        return adapter_refused(
            "slack", f"{exc.name} is not installed; install the Slack extra: pip install 'coven-codex[slack]'"
        )
    try:
        section, journal, secrets = load_adapter_start(
            "slack", args.config, args.journal, "docs/adapters.md: where to find the ids"
        )
        assert isinstance(section, SlackSection)
    except AdapterConfigError as exc:
        return adapter_refused("slack", str(exc))
    print(f"coven-codex slack: {section.access_policy().describe()}", file=sys.stderr, flush=True)

    async def started(identity: SlackIdentity) -> None:
        """Say who the bot is and which journal it follows (tests and service logs wait for this line)."""
        print(
            f"coven-codex slack: connected as {identity.user_id} in {identity.team_id} ({section.mode} mode);"
            f" following {journal} (cursor '{cursor_name('slack')}')",
            file=sys.stderr,
            flush=True,
        )

    async def run() -> None:
        await run_slack(SlackRun(section, secrets, journal), started)

    return run_adapter("slack", run)
