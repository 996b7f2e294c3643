"""``coven-codex telegram``: the Telegram chat adapter (``pip install 'coven-codex[telegram]'``; docs/adapters.md).

Everything comes from the ``[adapters.telegram]`` section of ``coven.toml``
(:class:`~coven_codex.adapters.kit.config.TelegramSection`); the bot token only from the
environment or a file, checked for its shape before anything connects, and never printed.
"""

from __future__ import annotations

import argparse
import sys

from coven_codex.adapters.kit.config import AdapterConfigError, TelegramSection
from coven_codex.adapters.kit.runner import cursor_name
from coven_codex.cli.options import adapter_refused, add_adapter_options, load_adapter_start, run_adapter

HELP = "the Telegram chat adapter on a journal ([adapters.telegram] in coven.toml; the daemon must be running)"


def configure(parser: argparse.ArgumentParser) -> None:
    """The command's options."""
    add_adapter_options(parser, "telegram")
    parser.add_argument("--api-url", default=None, help=argparse.SUPPRESS)


def execute(args: argparse.Namespace) -> int:
    """Check the configuration and the token, then run the adapter until SIGINT or SIGTERM."""
    try:
        from coven_codex.adapters.telegram.platform import (  # noqa: PLC0415 ([telegram] extra)
            TelegramSettings,
            run_telegram,
        )
    except ModuleNotFoundError as exc:
        if exc.name != "telegram":
            raise
        return adapter_refused(
            "telegram",
            "python-telegram-bot is not installed; install the Telegram extra: pip install 'coven-codex[telegram]'",
        )
    try:
        section, journal, secrets = load_adapter_start(
            "telegram",
            args.config,
            args.journal,
            "Telegram: a user's id from @userinfobot; a group's id (negative) from the bot's log or @RawDataBot",
        )
        assert isinstance(section, TelegramSection)
        token = secrets["token"]
        webhook_secret = secrets.get("webhook_secret")
    except AdapterConfigError as exc:
        return adapter_refused("telegram", str(exc))
    print(f"coven-codex telegram: {section.access_policy().describe()}", file=sys.stderr, flush=True)

    def started(bot: str) -> None:
        print(
            f"coven-codex telegram: connected as {bot[:80]}; following {journal} (cursor '{cursor_name('telegram')}')",
            file=sys.stderr,
            flush=True,
        )

    async def run() -> None:
        await run_telegram(
            TelegramSettings(
                journal=journal, token=token, section=section, webhook_secret=webhook_secret, api_url=args.api_url
            ),
            started,
        )

    return run_adapter("telegram", run)
