"""Who may use the page: an access token, the Host the server is bound to, the page's Origin.

The page drives a program that runs commands on this machine, so every request is checked here
before any route sees it (a pure ASGI middleware, :class:`Guard`):

- ``Host`` must name the address the server is bound to (with its port): a page on another
  site that rebinds its DNS name to 127.0.0.1 sends its own name and is refused.
- The access token, random per start unless the operator gives one, is accepted once as
  ``?token=`` on ``/``; the answer sets it as an HttpOnly, SameSite=Strict cookie and redirects
  to ``/`` so it does not stay in the address bar. Every other request needs the cookie.
  Tokens are compared in constant time.
- The live channel (WebSocket) and every request that changes something (``POST``) must come
  from the page's own origin (``Origin`` header).
- Every answer carries a Content-Security-Policy without inline scripts, forbids framing and
  MIME sniffing, and is not cached.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from http.cookies import SimpleCookie
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


@dataclass(frozen=True, slots=True)
class Access:
    """The token and the hosts the page may be reached by."""

    token: str
    hosts: frozenset[str]
    """Accepted ``Host`` header values (``host:port``)."""
    cookie: str
    """Name of the cookie that carries the token (includes the port: cookies ignore ports)."""

    @classmethod
    def for_bind(cls, token: str, host: str, port: int, extra_hosts: Iterable[str] = ()) -> Access:
        """Access for a server bound to ``host:port`` (loopback also accepts its other names)."""
        names = {host, *extra_hosts}
        if is_loopback(host):
            names |= {"127.0.0.1", "localhost", "::1"}
        return cls(token, frozenset(_host_port(name, port) for name in names), f"coven_web_{port}")

    def url(self, host: str, port: int) -> str:
        """The address to open: the page with its token."""
        return f"http://{_host_port(host, port)}/?token={self.token}"

    def token_ok(self, candidate: str | None) -> bool:
        """Constant-time comparison with the token."""
        if not candidate:
            return False
        return hmac.compare_digest(candidate.encode("utf-8", "replace"), self.token.encode())

    def origin_ok(self, origin: str | None) -> bool:
        """True when ``origin`` is this page's own (``http://`` + an accepted host)."""
        return origin is not None and origin.startswith("http://") and origin[len("http://") :] in self.hosts


def _cookie_token(headers: Headers, name: str) -> str | None:
    raw = headers.get("cookie")
    if not raw:
        return None
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(raw)
    except Exception:
        return None
    morsel = jar.get(name)
    return morsel.value if morsel is not None else None


class Guard:
    """ASGI middleware: refuses what :class:`Access` does not allow and adds the security headers."""

    def __init__(self, app: ASGIApp, access: Access) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        if headers.get("host") not in self.access.hosts:
            await self._refuse(
                scope,
                send,
                421,
                "This server does not answer for that host name; open the address `coven-codex web` printed.\n",
            )
            return
        if scope["type"] == "websocket":
            if not self.access.origin_ok(headers.get("origin")):
                await self._refuse(scope, send, 403, "cross-origin connection refused\n")
            elif not self.access.token_ok(_cookie_token(headers, self.access.cookie)):
                await self._refuse(scope, send, 401, NEEDS_TOKEN)
            else:
                await self.app(scope, receive, send)
            return
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        if "token" in query:
            if scope["path"] == "/" and self.access.token_ok(query["token"][0]):
                await self._login(send)
            else:
                await self._refuse(scope, send, 401, NEEDS_TOKEN)
            return
        if not self.access.token_ok(_cookie_token(headers, self.access.cookie)):
            await self._refuse(scope, send, 401, NEEDS_TOKEN)
            return
        if scope["method"] not in ("GET", "HEAD") and not self.access.origin_ok(headers.get("origin")):
            await self._refuse(scope, send, 403, "cross-origin request refused\n")
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
            await send(message)

        await self.app(scope, receive, send_with_headers)

    async def _login(self, send: Send) -> None:
        cookie = (f"{self.access.cookie}={self.access.token}; HttpOnly; SameSite=Strict; Path=/").encode()
        await send(
            {
                "type": "http.response.start",
                "status": 303,
                "headers": [(b"location", b"/"), (b"set-cookie", cookie), (b"content-length", b"0"), *SECURITY_HEADERS],
            }
        )
        await send({"type": "http.response.body", "body": b""})

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
