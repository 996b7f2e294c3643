"""``/metrics``, ``/healthz`` and ``/readyz`` on the opt-in ``metrics_port`` (docs/operations.md).

A small HTTP/1.1 server on the process's own event loop (:mod:`coven_codex.support.http11`), bounded:

- clients from loopback only, unless their address is in ``metrics_allow`` (CIDR networks); any
  other client is answered ``403`` and disconnected (the listening address is ``metrics_host``);
- at most :data:`MAX_CONNECTIONS` connections at once (another is closed at once, unanswered),
  one request per connection, read within :data:`REQUEST_TIMEOUT` seconds, no body;
- ``/metrics``: the process's :class:`~coven_codex.metrics.instruments.Instruments` in the
  Prometheus text format, after its scrape-time refreshers ran (each within :data:`CHECK_TIMEOUT`);
- ``/healthz``: ``200`` while the event loop runs a callback within :data:`MAX_LOOP_LAG` seconds
  (a blocked loop answers late or not at all, which a probe's timeout reports);
- ``/readyz``: ``200`` when every readiness check passes (each within :data:`CHECK_TIMEOUT`),
  else ``503`` with one line per failing check.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Awaitable, Callable, Sequence

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from coven_codex.metrics.instruments import Instruments
from coven_codex.metrics.options import MetricsOptions, Network
from coven_codex.support import http11
from coven_codex.support.listener import BoundedListener

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 16
REQUEST_TIMEOUT = 5.0
CHECK_TIMEOUT = 3.0
MAX_LOOP_LAG = 1.0
"""Seconds a scheduled callback may wait for the event loop before ``/healthz`` says unhealthy."""
MAX_REQUEST_BODY = 1024

ReadinessCheck = Callable[[], Awaitable[str | None]]
"""``None`` when ready, else why not (one line, e.g. ``the journal's Redis does not answer``)."""


async def loop_lag() -> float:
    """Seconds a callback scheduled now waits before the event loop runs it."""
    loop = asyncio.get_running_loop()
    ran: asyncio.Future[None] = loop.create_future()
    start = loop.time()
    loop.call_soon(ran.set_result, None)
    await ran
    return loop.time() - start


def allowed_peer(host: str, allow: Sequence[Network]) -> bool:
    """A client at ``host`` may use the port: loopback, or inside one of ``allow``."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback or any(address in network for network in allow)


class MetricsServer(BoundedListener):
    """Serve one process's metrics and probes on ``host:port`` (0: any free port)."""

    name = "the metrics server"
    purpose = "serve metrics"
    remedy = "pick another metrics_port (--metrics-port), or stop what holds it"
    max_connections = MAX_CONNECTIONS

    def __init__(
        self,
        instruments: Instruments,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        allow: Sequence[Network] = (),
        checks: dict[str, ReadinessCheck] | None = None,
        request_timeout: float = REQUEST_TIMEOUT,
        check_timeout: float = CHECK_TIMEOUT,
    ) -> None:
        super().__init__(host, port)
        self.request_timeout = request_timeout
        self.check_timeout = check_timeout
        self.instruments = instruments
        self.allow = tuple(allow)
        self.checks: dict[str, ReadinessCheck] = dict(checks or {})
        self._refused_once: set[str] = set()

    @classmethod
    def of(cls, options: MetricsOptions, instruments: Instruments, checks: dict[str, ReadinessCheck]) -> MetricsServer:
        """The server the settings ask for."""
        return cls(instruments, host=options.host, port=options.port, allow=options.allow, checks=checks)

    @property
    def url(self) -> str:
        """``http://HOST:PORT`` of the server."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def _started(self) -> None:
        log.info("metrics and health probes on %s (/metrics, /healthz, /readyz)", self.url)

    def _refuse_busy(self) -> None:
        self._note_refusal("busy", f"a connection over the {MAX_CONNECTIONS} served at once (closed)")

    async def _converse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        host = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        try:
            request = await asyncio.wait_for(
                http11.read_request(reader, writer, max_body=MAX_REQUEST_BODY), self.request_timeout
            )
        except (TimeoutError, http11.HttpProtocolError, asyncio.IncompleteReadError, ValueError):
            return
        if request is None:
            return
        if not allowed_peer(host, self.allow):
            self._note_refusal("peer", f"a client at {host} (not loopback, not in metrics_allow)")
            await self._send(writer, 403, b"forbidden: this address is not in metrics_allow\n")
            return
        status, body, content_type = await self._answer(request)
        await self._send(writer, status, body, content_type)

    async def _answer(self, request: http11.HttpRequest) -> tuple[int, bytes, str]:
        text = "text/plain; charset=utf-8"
        path = request.target.split("?", 1)[0]
        if request.method != "GET":
            return 405, f"{request.method[:20]} is not GET\n".encode(), text
        if path == "/metrics":
            self.instruments.event_loop_lag.set(await loop_lag())
            await self._refresh()
            return 200, generate_latest(self.instruments.registry), CONTENT_TYPE_LATEST
        if path == "/healthz":
            lag = await loop_lag()
            self.instruments.event_loop_lag.set(lag)
            if lag > MAX_LOOP_LAG:
                return 503, f"unhealthy: the event loop ran a callback {lag:.3f}s late\n".encode(), text
            return 200, f"ok: event loop lag {lag * 1000:.1f} ms\n".encode(), text
        if path == "/readyz":
            failing = await self.readiness()
            if failing:
                lines = "".join(f"{name}: {why}\n" for name, why in failing)
                return 503, f"not ready\n{lines}".encode(), text
            return 200, ("ready: " + ", ".join(self.checks) + "\n").encode(), text
        return 404, b"not found: try /metrics, /healthz or /readyz\n", text

    async def readiness(self) -> list[tuple[str, str]]:
        """The failing checks, by name, with why (empty: ready)."""
        names = list(self.checks)
        results = await asyncio.gather(*(self._check(self.checks[name]) for name in names))
        return [(name, why) for name, why in zip(names, results, strict=True) if why is not None]

    async def _check(self, check: ReadinessCheck) -> str | None:
        try:
            return await asyncio.wait_for(check(), self.check_timeout)
        except TimeoutError:
            return f"no answer within {self.check_timeout:g}s"
        except Exception as exc:
            return f"{type(exc).__name__}: {str(exc)[:200]}"

    async def _refresh(self) -> None:
        for refresh in self.instruments.refreshers:
            try:
                await asyncio.wait_for(refresh(), self.check_timeout)
            except Exception as exc:  # a gauge that cannot be read now keeps its last value
                self._note_refusal(f"refresh:{id(refresh)}", f"a metric could not be read ({type(exc).__name__})")

    def _note_refusal(self, kind: str, what: str) -> None:
        if kind not in self._refused_once:
            self._refused_once.add(kind)
            log.warning("metrics port: %s; refused (logged once)", what)

    @staticmethod
    async def _send(writer: asyncio.StreamWriter, status: int, body: bytes, content_type: str = "") -> None:
        writer.write(http11.full_response(status, body, content_type or "text/plain; charset=utf-8", keep_alive=False))
        await writer.drain()
