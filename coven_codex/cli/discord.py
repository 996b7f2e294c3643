"""``coven-codex discord``: the Discord chat adapter (``pip install 'coven-codex[discord]'``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import re
import sys
from pathlib import Path

from coven_codex.adapters.kit.access import AccessPolicy
from coven_codex.adapters.kit.platform import PlatformError

HELP = "the Discord chat adapter on a journal (the daemon must be running on it)"
DEFAULT_TOKEN_ENV = "DISCORD_BOT_TOKEN"
TOKEN_SHAPE = re.compile(r"^[A-Za-z0-9_\-]{20,}\.[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]{20,}$")
"""A Discord bot token: three base64url parts separated by dots."""


def configure(parser: argparse.ArgumentParser) -> None:
    """The command's options."""
    parser.add_argument("--journal", type=Path, required=True, help="the journal file the daemon follows")
    parser.add_argument(
        "--token-env",
        default=DEFAULT_TOKEN_ENV,
        help=f"environment variable holding the bot token (default {DEFAULT_TOKEN_ENV})",
    )
    parser.add_argument("--token-file", type=Path, default=None, help="file holding the bot token instead")
    parser.add_argument("--allow-user", action="append", default=[], help="a user id allowed to talk to Codex")
    parser.add_argument("--allow-role", action="append", default=[], help="a role id whose members are allowed")
    parser.add_argument(
        "--allow-channel",
        action="append",
        default=[],
        help="a channel id the bot answers in (default: every channel it can see)",
    )
    parser.add_argument("--admin", action="append", default=[], help="a user id allowed to run /new")
    parser.add_argument(
        "--listen-channel",
        action="append",
        default=[],
        help="a channel id where every message (not only mentions) goes to Codex",
    )
    parser.add_argument(
        "--thread-channel",
        action="append",
        default=[],
        help="a channel id where each mention starts a Discord thread of its own (the thread is the conversation)",
    )
    parser.add_argument("--api-base", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--gateway-url", default=None, help=argparse.SUPPRESS)


def _token(args: argparse.Namespace) -> str | None:
    """The bot token from the file or the environment, or None after saying what is wrong."""
    if args.token_file is not None:
        try:
            token: str = args.token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            print(f"coven-codex discord: cannot read the token file {args.token_file}: {exc.strerror}", file=sys.stderr)
            return None
        source = f"the token file {args.token_file}"
    else:
        token = os.environ.get(args.token_env, "").strip()
        source = f"the environment variable {args.token_env}"
        if not token:
            print(
                f"coven-codex discord: no bot token: set {args.token_env} (Developer Portal > your "
                "application > Bot > Reset Token) or pass --token-file",
                file=sys.stderr,
            )
            return None
    if not TOKEN_SHAPE.match(token):
        print(
            f"coven-codex discord: {source} does not hold a Discord bot token (three dot-separated "
            "parts); copy it again from the Developer Portal",
            file=sys.stderr,
        )
        return None
    return token


def execute(args: argparse.Namespace) -> int:
    """Run the adapter until interrupted."""
    try:
        from coven_codex.adapters.discord.platform import DiscordSettings, run_discord  # noqa: PLC0415 ([discord] extra)
        from coven_codex.adapters.discord.rest import set_api_base, set_gateway_url  # noqa: PLC0415
    except ModuleNotFoundError as exc:
        if exc.name != "discord":
            raise
        print("coven-codex discord: discord.py is not installed: pip install 'coven-codex[discord]'", file=sys.stderr)
        return 2
    if not args.journal.parent.is_dir():
        print(
            f"coven-codex discord: the journal's folder {args.journal.parent} does not exist; "
            "create it or pass the --journal the daemon uses",
            file=sys.stderr,
        )
        return 2
    if not args.allow_user and not args.allow_role:
        print(
            "coven-codex discord: nobody is allowed: pass --allow-user ID or --allow-role ID "
            "(Discord: Settings > Advanced > Developer Mode, then right-click > Copy ID)",
            file=sys.stderr,
        )
        return 2
    token = _token(args)
    if token is None:
        return 2
    if args.api_base:
        set_api_base(args.api_base)
    if args.gateway_url:
        set_gateway_url(args.gateway_url)
    access = AccessPolicy(
        users=frozenset(args.allow_user),
        roles=frozenset(args.allow_role),
        channels=frozenset(args.allow_channel) or None,
        admins=frozenset(args.admin),
    )
    settings = DiscordSettings(
        journal=args.journal,
        token=token,
        access=access,
        listen_channels=frozenset(args.listen_channel),
        thread_channels=frozenset(args.thread_channel),
    )
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(run_discord(settings))
    except PlatformError as exc:
        print(f"coven-codex discord: {exc}", file=sys.stderr)
        return 1
    return 0
