"""Who may use the page: an access token, a device key the browser cannot hand out, the Host, the Origin.

The page drives a program that runs commands on this machine, so every request is checked here
before any route sees it (a pure ASGI middleware, :class:`Guard`), and the live channel logs in
before it is served (:mod:`.app`). No cookie is used: cookies are not scoped by port, so any other
server on 127.0.0.1 would receive one.

- ``Host`` must name the address the server is bound to (with its port): a page on another
  site that rebinds its DNS name to 127.0.0.1 sends its own name and is refused.
- The page itself (``/``, ``/static/app.js``, ``/static/style.css``) is the same public file
  for everyone and carries no data; ``/?token=`` with a wrong token is refused. Everything
  else needs a credential the browser sends only on purpose:
- The live channel (WebSocket) logs in with its first message, answering the server's
  challenge: with the access token (``?token=`` of the printed address, read by the page's
  script, which then drops it from the address bar) or with a *device key*. On a token login
  the server hands out a device id and its secret, ``HMAC(token, id)``; the page imports the
  secret into WebCrypto as a non-extractable key and keeps that key in IndexedDB (scoped to
  the page's origin, port included). Later logins (a reload, another tab) answer the challenge
  with ``HMAC(secret, nonce)``: script can use the key but never read it, as with an
  HttpOnly cookie, and no other origin ever receives anything.
- A logged-in live channel gets a session value; ``POST /upload`` and ``GET /attachments/...``
  need it as ``Authorization: Bearer``. It is valid while that channel is open.
- The live channel and every request that changes something (``POST``) must come from the
  page's own origin (``Origin`` header). Tokens and proofs are compared in constant time.
- Behind a reverse proxy (HTTPS): only a request whose peer is a *trusted proxy*
  (``--trusted-proxy``, off by default) may say through ``Forwarded`` (its last element) or
  ``X-Forwarded-Proto`` / ``X-Forwarded-Host`` (their last values) which scheme and host the
  browser used; that host must be one the page may be opened by (any port), and the page's own
  origin is then ``https://`` + that host. From any other peer these headers are ignored.
- Every answer carries a Content-Security-Policy without inline scripts, forbids framing and
  MIME sniffing, and is not cached.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import os
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from ipaddress import IPv4Network, IPv6Network
from pathlib import Path
from urllib.parse import parse_qs

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

TOKEN_ENV = "COVEN_WEB_TOKEN"
MIN_TOKEN_LENGTH = 16
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
)
NEEDS_TOKEN = (
    "This page needs its access token. Open the address that `coven-codex web` printed "
    "when it started (it ends with ?token=...).\n"
)
NEEDS_SESSION = (
    "This needs the page's live connection: open the page (the address `coven-codex web` printed) "
    "and wait until it says connected.\n"
)
PUBLIC_PATHS = frozenset({"/", "/static/app.js", "/static/style.css"})
"""The page itself: the same files for everyone, no data."""
DEVICE_ID = re.compile(r"^[A-Za-z0-9_-]{16,64}$")
_DEVICE_LABEL = b"coven-web-device\0"
_PROOF_LABEL = b"coven-web-live\0"


class TokenError(ValueError):
    """The operator's token (file or environment variable) cannot be used; the message says why."""


def new_token() -> str:
    """A random access token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def load_token(token_file: Path | None, environ: dict[str, str] | None = None) -> tuple[str, str]:
    """The access token and where it came from: ``token_file``, ``$COVEN_WEB_TOKEN``, else random."""
    env = os.environ if environ is None else environ
    if token_file is not None:
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise TokenError(
                f"cannot read the token file {token_file}: {exc}; "
                "create it with one line of at least 16 random characters"
            ) from None
        source = f"the file {token_file}"
    elif env.get(TOKEN_ENV):
        token, source = env[TOKEN_ENV].strip(), f"${TOKEN_ENV}"
    else:
        return new_token(), "random for this start"
    if len(token) < MIN_TOKEN_LENGTH or not token.isascii() or not token.isprintable() or " " in token:
        raise TokenError(
            f"the token from {source} must be at least {MIN_TOKEN_LENGTH} printable ASCII "
            "characters without spaces; use e.g. `python -c 'import secrets; "
            "print(secrets.token_urlsafe(32))'`"
        )
    return token, source


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_port(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"{shown}:{port}"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def device_proof(secret: bytes, nonce: str) -> str:
    """What a device answers to the live channel's challenge ``nonce`` (base64url, no padding)."""
    return _b64(hmac.new(secret, _PROOF_LABEL + nonce.encode(), hashlib.sha256).digest())


_FORWARDED_HOST = re.compile(r"^(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?$")


class ProxyError(ValueError):
    """A ``--trusted-proxy`` value that is not an address or a network."""


@dataclass(frozen=True, slots=True)
class TrustedProxies:
    """The peers whose ``Forwarded`` / ``X-Forwarded-*`` headers are believed (none by default)."""

    networks: tuple[IPv4Network | IPv6Network, ...] = ()

    @classmethod
    def parse(cls, values: Iterable[str]) -> TrustedProxies:
        """From addresses or networks (``127.0.0.1``, ``10.0.0.0/8``, ``::1``). Raises ProxyError."""
        networks: list[IPv4Network | IPv6Network] = []
        for value in values:
            try:
                networks.append(ipaddress.ip_network(value.strip().strip("[]"), strict=False))
            except ValueError:
                raise ProxyError(
                    f"--trusted-proxy {value!r} is not an IP address or network; give the address the "
                    "reverse proxy connects from, e.g. 127.0.0.1 or 10.0.0.0/8"
                ) from None
        return cls(tuple(networks))

    def trusts(self, peer: str | None) -> bool:
        """True when ``peer`` (the connection's IP address) is a trusted proxy."""
        if not self.networks or not peer:
            return False
        try:
            address = ipaddress.ip_address(peer)
        except ValueError:
            return False
        return any(address in network for network in self.networks)


NO_PROXIES = TrustedProxies()
"""The default: no peer's forwarding headers are believed."""


@dataclass(frozen=True, slots=True)
class PageAddress:
    """How the browser reached the page: its scheme and host (``host[:port]``); its origin."""

    scheme: str
    host: str

    @property
    def origin(self) -> str:
        """The page's own origin, as the browser sends it in ``Origin``."""
        return f"{self.scheme}://{self.host}"


def forwarded(headers: Headers) -> tuple[str | None, str | None]:
    """The scheme and host a proxy forwards: from the last element of ``Forwarded`` (RFC 7239),
    else the last values of ``X-Forwarded-Proto`` and ``X-Forwarded-Host``; None for what is absent."""
    scheme: str | None = None
    host: str | None = None
    header = headers.get("forwarded")
    if header:
        last = header.split(",")[-1]
        for pair in last.split(";"):
            name, _, value = pair.strip().partition("=")
            value = value.strip().strip('"')
            if name.lower() == "proto":
                scheme = value.lower()
            elif name.lower() == "host":
                host = value
        return scheme, host
    proto = headers.get("x-forwarded-proto")
    forwarded_host = headers.get("x-forwarded-host")
    return (
        proto.split(",")[-1].strip().lower() if proto else None,
        forwarded_host.split(",")[-1].strip() if forwarded_host else None,
    )


def _host_name(host: str) -> str:
    """``host`` without its port (``[::1]:443`` → ``::1``)."""
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


@dataclass(frozen=True, slots=True)
class Access:
    """The token and the hosts the page may be reached by."""

    token: str
    hosts: frozenset[str]
    """Accepted ``Host`` header values (``host:port``)."""
    names: frozenset[str] = frozenset()
    """Host names (no port) a trusted proxy may forward: the bound host and ``--allowed-host``."""
    proxies: TrustedProxies = NO_PROXIES

    @classmethod
    def for_bind(
        cls,
        token: str,
        host: str,
        port: int,
        extra_hosts: Iterable[str] = (),
        proxies: TrustedProxies = NO_PROXIES,
    ) -> Access:
        """Access for a server bound to ``host:port`` (loopback also accepts its other names)."""
        names = {host, *extra_hosts}
        if is_loopback(host):
            names |= {"127.0.0.1", "localhost", "::1"}
        hosts = frozenset(_host_port(name, port) for name in names)
        return cls(token, hosts, frozenset(name.strip("[]").lower() for name in names), proxies)

    def address(self, headers: Headers, peer: str | None) -> PageAddress | None:
        """How the browser reached the page (forwarded by a trusted proxy, else this server's
        ``http://`` + ``Host``); None when that host is not one the page answers for."""
        if self.proxies.trusts(peer):
            scheme, host = forwarded(headers)
            if scheme is not None or host is not None:
                host = host if host is not None else headers.get("host")
                if (
                    scheme not in (None, "http", "https")
                    or host is None
                    or not _FORWARDED_HOST.match(host)
                    or _host_name(host).lower() not in self.names
                ):
                    return None
                return PageAddress(scheme or "http", host.lower())
        host = headers.get("host")
        return PageAddress("http", host) if host in self.hosts else None

    def url(self, host: str, port: int) -> str:
        """The address to open: the page with its token."""
        return f"http://{_host_port(host, port)}/?token={self.token}"

    def token_ok(self, candidate: str | None) -> bool:
        """Constant-time comparison with the token."""
        if not candidate:
            return False
        return hmac.compare_digest(candidate.encode("utf-8", "replace"), self.token.encode())

    @staticmethod
    def origin_ok(origin: str | None, page: PageAddress) -> bool:
        """True when ``origin`` is the page's own (where the browser reached it, see :meth:`address`)."""
        return origin is not None and hmac.compare_digest(origin.lower().encode(), page.origin.lower().encode())

    def new_device(self) -> tuple[str, bytes]:
        """A new device id and its secret (derived from the token: no state, valid while the token is)."""
        device = secrets.token_urlsafe(18)
        return device, self.device_secret(device)

    def device_secret(self, device: str) -> bytes:
        """The secret of device ``device``: ``HMAC-SHA256(token, label + id)``."""
        return hmac.new(self.token.encode(), _DEVICE_LABEL + device.encode(), hashlib.sha256).digest()

    def device_ok(self, device: str, nonce: str, proof: str) -> bool:
        """True when ``proof`` is device ``device``'s answer to ``nonce`` (constant time)."""
        if not DEVICE_ID.match(device):
            return False
        expected = device_proof(self.device_secret(device), nonce)
        return hmac.compare_digest(proof.encode("utf-8", "replace"), expected.encode())


@dataclass
class Sessions:
    """Session values handed to logged-in live channels; valid until revoked (the channel closed)."""

    _live: set[bytes] = field(default_factory=set)

    @staticmethod
    def _key(value: str) -> bytes:
        return hashlib.sha256(value.encode("utf-8", "replace")).digest()

    def issue(self) -> str:
        """A new session value (256 bits)."""
        value = secrets.token_urlsafe(32)
        self._live.add(self._key(value))
        return value

    def revoke(self, value: str) -> None:
        """The channel that got ``value`` closed: it is refused from now on."""
        self._live.discard(self._key(value))

    def valid(self, value: str | None) -> bool:
        """True for a value issued and not revoked (looked up by its hash: no timing on the value)."""
        return value is not None and value != "" and self._key(value) in self._live

    def __len__(self) -> int:
        return len(self._live)


def bearer(headers: Headers) -> str | None:
    """The value of ``Authorization: Bearer VALUE``, or None."""
    scheme, _, value = (headers.get("authorization") or "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


class Guard:
    """ASGI middleware: refuses what :class:`Access` and :class:`Sessions` do not allow; adds the security headers."""

    def __init__(self, app: ASGIApp, access: Access, sessions: Sessions) -> None:
        self.app = app
        self.access = access
        self.sessions = sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        client = scope.get("client")
        page = self.access.address(headers, client[0] if client else None)
        if page is None:
            await self._refuse(
                scope,
                send,
                421,
                "This server does not answer for that host name; open the address `coven-codex web` printed.\n",
            )
            return
        if scope["type"] == "websocket":
            # The live channel logs in with its first message (app.py); only its origin is checked here.
            if not self.access.origin_ok(headers.get("origin"), page):
                await self._refuse(scope, send, 403, "cross-origin connection refused\n")
            else:
                await self.app(scope, receive, send)
            return
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        if "token" in query and not (scope["path"] == "/" and self.access.token_ok(query["token"][0])):
            await self._refuse(scope, send, 401, NEEDS_TOKEN)
            return
        if scope["path"] not in PUBLIC_PATHS and not self.sessions.valid(bearer(headers)):
            await self._refuse(scope, send, 401, NEEDS_SESSION)
            return
        if scope["method"] not in ("GET", "HEAD") and not self.access.origin_ok(headers.get("origin"), page):
            await self._refuse(scope, send, 403, "cross-origin request refused\n")
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
            await send(message)

        await self.app(scope, receive, send_with_headers)

    async def _refuse(self, scope: Scope, send: Send, status: int, text: str) -> None:
        if scope["type"] == "websocket":
            # Closing before accepting answers the upgrade request with HTTP 403.
            await send({"type": "websocket.close", "code": 1008, "reason": ""})
            return
        body = text.encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"content-length", str(len(body)).encode()),
                    *SECURITY_HEADERS,
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
