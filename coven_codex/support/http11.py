"""Just enough HTTP/1.1 for the package's small loopback servers (the scripted model server, the
OTLP trace receiver): keep-alive, Content-Length and chunked request bodies with a size limit,
gzip/deflate request encodings, chunked streaming responses. (The webhook sender, the package's
one client to the internet, uses ``httpx``: :mod:`coven_codex.webhooks.http`.)"""

from __future__ import annotations

import asyncio
import zlib
from dataclasses import dataclass
from http import HTTPStatus

MAX_HEADER_LINES = 200
MAX_BODY_BYTES = 256 * 2**20


class HttpProtocolError(Exception):
    """The peer sent something that is not HTTP/1.1 we understand; the connection is closed."""


class BodyTooLargeError(HttpProtocolError):
    """The request body is larger than the caller's limit; the connection is closed."""


class UnsupportedEncodingError(Exception):
    """The request body uses a Content-Encoding this server cannot decode."""


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """One parsed HTTP request: header names lower-cased, the body with its encodings undone."""

    method: str
    target: str
    version: str
    headers: dict[str, str]
    body: bytes

    @property
    def keep_alive(self) -> bool:
        """The client wants the connection kept open (the default of HTTP/1.1, opt-in for HTTP/1.0)."""
        connection = self.headers.get("connection", "").lower()
        if self.version == "HTTP/1.0":
            return connection == "keep-alive"
        return connection != "close"


async def read_request(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, max_body: int = MAX_BODY_BYTES
) -> HttpRequest | None:
    """Read one request; ``None`` when the peer closed the connection between requests.

    A body longer than ``max_body`` raises :class:`BodyTooLargeError` before it is read (for a
    ``Content-Length``) or as soon as the chunks pass the limit."""
    request_line = await reader.readline()
    while request_line in (b"\r\n", b"\n"):
        request_line = await reader.readline()
    if not request_line:
        return None
    parts = request_line.decode("latin-1").strip().split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise HttpProtocolError(f"bad request line {request_line[:80]!r}")
    method, target, version = parts
    headers = await _read_headers(reader)
    if headers.get("expect", "").lower() == "100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        await writer.drain()
    body = await _read_body(reader, headers, max_body)
    return HttpRequest(method.upper(), target, version, headers, body)


async def _read_headers(reader: asyncio.StreamReader) -> dict[str, str]:
    """The header lines up to the blank line, names lower-cased, repeated names joined with ``, ``."""
    headers: dict[str, str] = {}
    for _ in range(MAX_HEADER_LINES):
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            return headers
        name, sep, value = line.decode("latin-1").partition(":")
        if not sep:
            raise HttpProtocolError(f"bad header line {line[:80]!r}")
        key = name.strip().lower()
        headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
    raise HttpProtocolError("too many header lines")


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str], max_body: int) -> bytes:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        parts: list[bytes] = []
        total = 0
        while True:
            size_line = await reader.readline()
            try:
                size = int(size_line.split(b";")[0].strip(), 16)
            except ValueError:
                raise HttpProtocolError(f"bad chunk size {size_line[:40]!r}") from None
            if size == 0:
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass  # trailers are read and ignored
                return b"".join(parts)
            total += size
            if total > max_body:
                raise BodyTooLargeError(f"request body over {max_body} bytes")
            parts.append(await reader.readexactly(size))
            await reader.readline()
    length_text = headers.get("content-length")
    if length_text is None:
        return b""
    try:
        length = int(length_text)
    except ValueError:
        raise HttpProtocolError(f"bad Content-Length {length_text!r}") from None
    if length < 0:
        raise HttpProtocolError(f"Content-Length {length} out of range")
    if length > max_body:
        raise BodyTooLargeError(f"Content-Length {length} over {max_body} bytes")
    return await reader.readexactly(length)


def decode_body(body: bytes, content_encoding: str, *, limit: int = MAX_BODY_BYTES) -> bytes:
    """Undo ``Content-Encoding``: identity, or one gzip or deflate, inflated at most ``limit`` bytes.

    Inflation goes :data:`INFLATE_STEP` bytes at a time and stops as soon as the output passes
    ``limit`` (:class:`BodyTooLargeError`), so a compression bomb costs ``limit`` bytes, never
    what it expands to. Stacked codings (``gzip, gzip``) and unknown ones raise
    :class:`UnsupportedEncodingError`; a body that does not inflate raises :class:`zlib.error`."""
    codings = [c.strip().lower() for c in content_encoding.split(",") if c.strip().lower() not in ("", "identity")]
    if len(codings) > 1:
        raise UnsupportedEncodingError(f"{', '.join(codings)} (stacked; send one of gzip or deflate)")
    if not codings:
        return body
    if codings[0] in {"gzip", "x-gzip"}:
        return _inflate(body, 16 + zlib.MAX_WBITS, limit)
    if codings[0] == "deflate":
        return _inflate(body, zlib.MAX_WBITS, limit)
    raise UnsupportedEncodingError(codings[0])


INFLATE_STEP = 2**20
"""How much :func:`decode_body` inflates per step (its memory beyond ``limit``)."""


def _inflate(data: bytes, wbits: int, limit: int) -> bytes:
    """``data`` inflated (concatenated gzip members too), refused once the output passes ``limit``."""
    parts: list[bytes] = []
    size = 0
    pending = data
    while pending:
        inflater = zlib.decompressobj(wbits)
        while not inflater.eof:
            chunk = inflater.decompress(pending, INFLATE_STEP)
            if not chunk and len(inflater.unconsumed_tail) == len(pending):
                raise zlib.error("the compressed body ends before its end marker")
            parts.append(chunk)
            size += len(chunk)
            if size > limit:
                raise BodyTooLargeError(f"request body over {limit} bytes once decompressed")
            pending = inflater.unconsumed_tail
        pending = inflater.unused_data
        if wbits == zlib.MAX_WBITS and pending:
            raise zlib.error("data after the end of the deflate stream")
    return b"".join(parts)


def response_head(status: int, headers: list[tuple[str, str]]) -> bytes:
    """The status line and headers of a response, ending with the blank line."""
    reason = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "Status"
    lines = [f"HTTP/1.1 {status} {reason}"] + [f"{name}: {value}" for name, value in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def full_response(
    status: int, body: bytes, content_type: str, *, keep_alive: bool, extra_headers: tuple[tuple[str, str], ...] = ()
) -> bytes:
    """A whole response with a ``Content-Length`` body and the connection header ``keep_alive`` asks for."""
    headers = [
        ("content-type", content_type),
        ("content-length", str(len(body))),
        ("connection", "keep-alive" if keep_alive else "close"),
        *extra_headers,
    ]
    return response_head(status, headers) + body


def chunk(data: bytes) -> bytes:
    """One chunk of a ``Transfer-Encoding: chunked`` response (never the terminating one)."""
    return b"%x\r\n%s\r\n" % (len(data), data) if data else b""


LAST_CHUNK = b"0\r\n\r\n"
