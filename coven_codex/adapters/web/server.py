"""Serving the page with uvicorn on a socket bound before start, so the URL names the real port."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable

import uvicorn

from coven_codex.adapters.web.app import create_app
from coven_codex.adapters.web.auth import NO_PROXIES, Access, TrustedProxies
from coven_codex.adapters.web.connections import ConnectionLimits, guarded_protocol
from coven_codex.attachments import ImageStore, uploads_dir
from coven_codex.journal.opening import JournalName, local_base, open_journal
from coven_codex.metrics.checks import journal_reachable
from coven_codex.metrics.instruments import Instruments
from coven_codex.metrics.options import MetricsOptions
from coven_codex.metrics.server import MetricsServer
from coven_codex.settings import state_root

WS_MAX_MESSAGE = 1024 * 1024
"""Largest message a tab may send on the live channel (a thought is at most 100,000 characters)."""


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: any free port). Raises OSError."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


async def serve(
    journal_path: JournalName,
    sock: socket.socket,
    *,
    token: str,
    sender: str,
    announce: Callable[[str], None],
    extra_hosts: tuple[str, ...] = (),
    proxies: TrustedProxies = NO_PROXIES,
    metrics: MetricsOptions | None = None,
) -> None:
    """Serve the page for ``journal_path`` on ``sock`` until SIGINT/SIGTERM; ``announce`` gets its URL
    (and, behind a trusted proxy, the address through it for each ``extra_hosts`` name). ``metrics``:
    serve ``/metrics``, ``/healthz`` and ``/readyz`` too (docs/operations.md); a port that cannot be
    listened on raises :class:`OSError` saying so, before the page is served."""
    host, port = sock.getsockname()[:2]
    access = Access.for_bind(token, host, port, extra_hosts, proxies)
    journal = open_journal(journal_path)
    try:
        async with contextlib.AsyncExitStack() as stack:
            probes: MetricsServer | None = None
            if metrics is not None:
                instruments = Instruments()
                probes = MetricsServer.of(metrics, instruments, {"journal": journal_reachable(journal, instruments)})
                await stack.enter_async_context(probes)
            store = ImageStore(uploads_dir(local_base(journal_path, state_root())))
            app = create_app(journal, store, access, sender, metrics=probes)
            config = uvicorn.Config(
                app,
                http=guarded_protocol(ConnectionLimits.for_this_process()),
                log_level="warning",
                ws="websockets-sansio",
                ws_max_size=WS_MAX_MESSAGE,
                ws_ping_interval=20.0,
                ws_ping_timeout=20.0,
                timeout_graceful_shutdown=3,
                proxy_headers=False,
                server_header=False,
                access_log=False,
            )
            server = uvicorn.Server(config)
            shown = extra_hosts[0] if extra_hosts and host in ("0.0.0.0", "::") else host
            announce(access.url(shown, port))
            if proxies.networks:
                for name in extra_hosts:
                    announce(f"https://{name}/?token={token} (through your HTTPS reverse proxy)")
            if probes is not None:
                announce(f"{probes.url}/metrics (and /healthz, /readyz)")
            await server.serve(sockets=[sock])
    finally:
        await journal.aclose()
