"""``coven-codex discord``: the Discord chat adapter (``pip install 'coven-codex[discord]'``; docs/adapters.md).

Everything comes from the ``[adapters.discord]`` section of ``coven.toml``
(:class:`~coven_codex.adapters.kit.config.DiscordSection`); the bot token only from the
environment or a file, checked for its shape before anything connects, and never printed.
"""

from __future__ import annotations

import argparse
import sys

from coven_codex.adapters.kit.config import AdapterConfigError, DiscordSection
from coven_codex.adapters.kit.runner import cursor_name
from coven_codex.cli.options import adapter_refused, add_adapter_options, load_adapter_start, run_adapter

HELP = "the Discord chat adapter on a journal ([adapters.discord] in coven.toml; the daemon must be running)"


def configure(parser: argparse.ArgumentParser) -> None:
    """The command's options."""
    add_adapter_options(parser, "discord")
    parser.add_argument("--api-base", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--gateway-url", default=None, help=argparse.SUPPRESS)


def execute(args: argparse.Namespace) -> int:
    """Check the configuration and the token, then run the adapter until SIGINT or SIGTERM."""
    try:
        from coven_codex.adapters.discord.platform import DiscordSettings, run_discord  # noqa: PLC0415 ([discord] extra)
        from coven_codex.adapters.discord.rest import set_api_base, set_gateway_url  # noqa: PLC0415
    except ModuleNotFoundError as exc:
        if exc.name != "discord":
            raise
        return adapter_refused(
            "discord", "discord.py is not installed; install the Discord extra: pip install 'coven-codex[discord]'"
        )
    try:
        section, journal, secrets = load_adapter_start(
            "discord",
            args.config,
            args.journal,
            "Discord: Settings > Advanced > Developer Mode, then right-click > Copy ID",
        )
        assert isinstance(section, DiscordSection)
        token = secrets["token"]
    except AdapterConfigError as exc:
        return adapter_refused("discord", str(exc))
    if args.api_base:
        set_api_base(args.api_base)
    if args.gateway_url:
        set_gateway_url(args.gateway_url)
    print(f"coven-codex discord: {section.access_policy().describe()}", file=sys.stderr, flush=True)

    def started(bot: str) -> None:
        print(
            f"coven-codex discord: connected as {bot[:80]}; following {journal} (cursor '{cursor_name('discord')}')",
            file=sys.stderr,
            flush=True,
        )

    async def run() -> None:
        await run_discord(DiscordSettings(journal=journal, token=token, section=section), started)

    return run_adapter("discord", run)
