"""Downloading a user's file from a platform: only from its own hosts, never more than the limit.

A platform's message names its files by URL and by a declared size. Neither is trusted: the URL
must be on one of the platform's own hosts (the bot token, when one is sent, goes nowhere else),
and the body is read in chunks and refused as soon as it passes the limit, whatever the declared
size or ``Content-Length`` said (a body is never cut short and passed on as if it were whole).
Callers download only for senders the access policy lets in, before anything else is fetched.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import aiohttp

from coven_codex.adapters.kit.render import clip

CHUNK = 64 * 1024
TIMEOUT = aiohttp.ClientTimeout(total=120, sock_read=30)


class DownloadRefused(Exception):
    """A file was not downloaded (or not whole); the message says why, for the user."""


class Downloader:
    """Downloads with one HTTP session, from ``hosts`` only, at most ``limit`` bytes each."""

    def __init__(self, hosts: frozenset[str], limit: int) -> None:
        self.hosts = hosts
        self.limit = limit
        self._session: aiohttp.ClientSession | None = None

    def allows(self, url: str) -> bool:
        """Whether ``url`` is an http(s) address on one of the platform's own hosts."""
        parts = urlsplit(url)
        return parts.scheme in ("https", "http") and (parts.hostname or "") in self.hosts

    async def fetch(self, url: str, headers: dict[str, str] | None = None) -> bytes:
        """The whole body at ``url``; :class:`DownloadRefused` when it is elsewhere, fails or is too large."""
        if not self.allows(url):
            host = urlsplit(url).hostname or "none"
            raise DownloadRefused(f"its address is not on the platform's own hosts ({clip(host, 60)})")
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=TIMEOUT)
        too_large = f"it is larger than {self.limit // 2**20} MiB"
        try:
            async with self._session.get(url, headers=headers or {}, allow_redirects=False) as response:
                if response.status != 200:
                    raise DownloadRefused(f"the download answered HTTP {response.status}")
                if response.content_length is not None and response.content_length > self.limit:
                    raise DownloadRefused(too_large)
                body = bytearray()
                async for chunk in response.content.iter_chunked(CHUNK):
                    body += chunk
                    if len(body) > self.limit:
                        raise DownloadRefused(too_large)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise DownloadRefused(f"the download failed ({type(exc).__name__}); send it again") from None
        return bytes(body)

    async def aclose(self) -> None:
        """Close the HTTP session."""
        if self._session is not None:
            await self._session.close()
            self._session = None
