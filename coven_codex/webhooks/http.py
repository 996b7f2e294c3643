"""The webhook sender's HTTP client: ``httpx`` (docs/webhooks.md, *Delivery*).

One :class:`httpx.AsyncClient` per target, kept while its sender runs: connections are pooled
(kept alive between deliveries), proxies come from the environment (``HTTPS_PROXY``,
``HTTP_PROXY``, ``ALL_PROXY``, ``NO_PROXY``), certificates are checked against the system's
trust store (``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` honoured) or an ``ssl.SSLContext`` given by
the caller. Redirects are not followed. Of a response only the status, the headers and the
first :data:`MAX_RESPONSE_BODY` bytes of the body are kept.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

import httpx

MAX_RESPONSE_BODY = 64 * 1024
"""The most of a response body kept (for the message of a rejection); the rest is not read."""
MAX_CONNECTIONS = 4
"""Connections one target's client holds at most (a sender sends one request at a time)."""

DeliveryError = httpx.HTTPError
"""A request that got no HTTP answer (connection, TLS, proxy or protocol failure, or a timeout)."""


@dataclass(frozen=True, slots=True)
class HttpResponse:
    """An answer: status, headers (names lower-cased), the body's first bytes."""

    status: int
    headers: dict[str, str]
    body: bytes


def open_client(*, timeout: float, ssl_context: ssl.SSLContext | None = None) -> httpx.AsyncClient:
    """A pooled client bounded by ``timeout`` seconds per phase (connect, write, each read); close it
    with ``aclose``. Proxies and the trust store come from the environment; ``ssl_context`` replaces
    the trust store."""
    return httpx.AsyncClient(
        verify=ssl_context if ssl_context is not None else True,
        trust_env=True,
        follow_redirects=False,
        timeout=httpx.Timeout(timeout),
        limits=httpx.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_CONNECTIONS),
    )


async def post(client: httpx.AsyncClient, url: str, body: bytes, headers: list[tuple[str, str]]) -> HttpResponse:
    """POST ``body`` to ``url``; :data:`DeliveryError` when no answer came (the caller bounds the time)."""
    async with client.stream("POST", url, content=body, headers=headers) as response:
        kept = bytearray()
        async for piece in response.aiter_bytes():
            kept += piece
            if len(kept) >= MAX_RESPONSE_BODY:
                break
        return HttpResponse(
            response.status_code,
            {name.lower(): value for name, value in response.headers.items()},
            bytes(kept[:MAX_RESPONSE_BODY]),
        )
