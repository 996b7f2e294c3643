"""``coven-codex web``: the web chat page on a journal."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import signal
import sys
from pathlib import Path
from types import FrameType

from coven_codex.adapters.web.auth import TOKEN_ENV, ProxyError, TokenError, TrustedProxies, is_loopback, load_token
from coven_codex.cli.options import JOURNAL_METAVAR, journal_argument
from coven_codex.journal.opening import JournalName
from coven_codex.metrics.options import MetricsOptions, parse_networks

HELP = "the web chat page on a journal (the daemon must be running on it)"


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``web`` command's options to ``parser``."""
    parser.add_argument(
        "--journal",
        type=journal_argument,
        metavar=JOURNAL_METAVAR,
        required=True,
        help="the journal the daemon follows (a file, or redis://...)",
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)"
    )
    parser.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080; 0: any free port)")
    parser.add_argument(
        "--token-file",
        type=Path,
        default=None,
        help=f"read the access token from this file (else ${TOKEN_ENV}, else a random one)",
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="another host name the page may be opened by (for a --host that is not loopback: "
        "the machine's name or address); repeatable",
    )
    parser.add_argument(
        "--trusted-proxy",
        action="append",
        default=[],
        metavar="ADDR",
        help="a reverse proxy's address or network (e.g. 127.0.0.1): its Forwarded / X-Forwarded-Proto / "
        "X-Forwarded-Host headers say how the browser reached the page (https); off by default; repeatable",
    )
    parser.add_argument("--sender", default=None, help="your name in the journal (default: your login name)")
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus /metrics, /healthz and /readyz on this port (0: any free port); off by default",
    )
    parser.add_argument(
        "--metrics-host", default="127.0.0.1", help="the address the metrics port listens on (default 127.0.0.1)"
    )
    parser.add_argument(
        "--metrics-allow",
        action="append",
        default=[],
        metavar="CIDR",
        help="a network besides loopback whose clients may use the metrics port (repeatable)",
    )


def execute(args: argparse.Namespace) -> int:
    """Serve the web chat page on the journal (needs the ``web`` extra); returns the exit code, 2 for bad options."""
    try:
        from coven_codex.adapters.web.server import bind, serve  # noqa: PLC0415 (the optional [web] extra)
    except ModuleNotFoundError as exc:
        print(
            f"coven-codex web: {exc.name} is not installed; install the web extra: pip install 'coven-codex[web]'",
            file=sys.stderr,
        )
        return 2
    journal_path: JournalName = args.journal
    if isinstance(journal_path, Path) and not journal_path.parent.is_dir():
        print(
            f"coven-codex web: the journal's folder {journal_path.parent} does not exist; "
            "create it or pass the --journal the daemon uses",
            file=sys.stderr,
        )
        return 2
    if not 0 <= args.port <= 65535:
        print("coven-codex web: --port must be between 0 and 65535", file=sys.stderr)
        return 2
    metrics: MetricsOptions | None = None
    if args.metrics_port is not None:
        if not 0 <= args.metrics_port <= 65535:
            print("coven-codex web: --metrics-port must be between 0 and 65535", file=sys.stderr)
            return 2
        try:
            metrics = MetricsOptions(args.metrics_port, args.metrics_host, tuple(parse_networks(args.metrics_allow)))
        except ValueError as exc:
            print(f"coven-codex web: {exc}", file=sys.stderr)
            return 2
    try:
        token, _source = load_token(args.token_file)
    except TokenError as exc:
        print(f"coven-codex web: {exc}", file=sys.stderr)
        return 2
    try:
        proxies = TrustedProxies.parse(args.trusted_proxy)
    except ProxyError as exc:
        print(f"coven-codex web: {exc}", file=sys.stderr)
        return 2
    if not is_loopback(args.host):
        print(
            f"coven-codex web: warning: listening on {args.host}, not loopback: anyone who can reach it and "
            "learns the token can run commands here, and plain HTTP shows the token to the network",
            file=sys.stderr,
        )
    try:
        sock = bind(args.host, args.port)
    except OSError as exc:
        print(
            f"coven-codex web: cannot listen on {args.host}:{args.port}: {exc.strerror}; "
            "choose another --port (0 picks a free one)",
            file=sys.stderr,
        )
        return 2
    sender = args.sender or _login_name()

    def announce(url: str) -> None:
        print(f"coven-codex web: open {url}", flush=True)

    # uvicorn handles SIGINT/SIGTERM while it serves (a clean shutdown), then raises the signal again
    # for the previous handler: this one turns it into a normal exit with status 0.
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, _stopped)
    try:
        asyncio.run(
            serve(
                journal_path,
                sock,
                token=token,
                sender=sender,
                announce=announce,
                extra_hosts=tuple(args.allowed_host),
                proxies=proxies,
                metrics=metrics,
            )
        )
    except (_Stopped, KeyboardInterrupt):
        pass
    except OSError as exc:  # the metrics port cannot be listened on (MetricsServer says which and what to do)
        print(f"coven-codex web: {exc}", file=sys.stderr)
        return 2
    finally:
        sock.close()
    return 0


class _Stopped(Exception):
    """SIGINT or SIGTERM arrived."""


def _stopped(_number: int, _frame: FrameType | None) -> None:
    raise _Stopped


def _login_name() -> str:
    try:
        return getpass.getuser()
    except OSError:
        return "user"
