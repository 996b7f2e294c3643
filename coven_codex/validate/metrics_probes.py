"""validate's check of the metrics port (``metrics_port``, docs/operations.md, Metrics and health)."""

from __future__ import annotations

import asyncio
import ipaddress
import socket

from coven_codex.validate.framework import ProbeContext, ProbeResult, Status


async def probe_metrics_port(context: ProbeContext) -> ProbeResult:
    """The metrics port can be listened on (``metrics_host:metrics_port``); skipped when it is off."""
    settings = context.settings
    if settings.metrics_port is None:
        return ProbeResult(Status.SKIP, "metrics_port is not set (no /metrics, /healthz, /readyz)")
    where = f"{settings.metrics_host}:{settings.metrics_port}"
    try:
        await asyncio.to_thread(_bind, settings.metrics_host, settings.metrics_port)
    except OSError as exc:
        return ProbeResult.fail(
            f"cannot listen on {where} for metrics ({exc.strerror or exc})",
            "Pick a free metrics_port (--metrics-port) and an address of this machine as metrics_host, "
            "or stop what holds the port.",
        )
    if not _loopback(settings.metrics_host) and not settings.metrics_allow:
        return ProbeResult.warn(
            f"{where} listens beyond loopback, but metrics_allow is empty: only loopback clients are served",
            "Add the network of your Prometheus and probes to metrics_allow (e.g. 10.0.0.0/8).",
        )
    allowed = ", ".join(["loopback", *settings.metrics_allow])
    return ProbeResult.ok(f"{where} is free; clients served: {allowed}")


def _bind(host: str, port: int) -> None:
    """Listen on ``host:port`` for a moment, as the daemon will (SO_REUSEADDR, like asyncio's server)."""
    for family, kind, proto, _, address in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen(1)
        return


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
