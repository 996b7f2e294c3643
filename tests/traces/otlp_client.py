"""A raw OTLP/HTTP client for the receiver's tests (tests/traces and tests/adversarial): one
request per connection by default, headers written as given, the answer's status and body."""

from __future__ import annotations

import asyncio

from coven_codex.traces.otel_config import SECRET_HEADER
from coven_codex.traces.receiver import OtlpReceiver

PROTOBUF = "application/x-protobuf"


def secret_line(receiver: OtlpReceiver) -> str:
    """The header line carrying ``receiver``'s secret, as Codex sends it."""
    return f"{SECRET_HEADER}: {receiver.target.headers[SECRET_HEADER]}\r\n"


async def post(
    receiver: OtlpReceiver,
    path: str,
    body: bytes,
    content_type: str,
    *,
    extra: str = "",
    close: bool = True,
    with_secret: bool = True,
) -> tuple[int, bytes]:
    """POST ``body`` to ``receiver`` (with its secret header unless ``with_secret`` is false)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", receiver.port)
    try:
        head = (
            f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: {content_type}\r\ncontent-length: {len(body)}\r\n"
            f"{secret_line(receiver) if with_secret else ''}{extra}"
            f"connection: {'close' if close else 'keep-alive'}\r\n\r\n"
        )
        writer.write(head.encode() + body)
        await writer.drain()
        return await read_response(reader)
    finally:
        writer.close()


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """The status and body of the next response on ``reader``."""
    status_line = await reader.readline()
    status = int(status_line.split()[1])
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    return status, await reader.readexactly(length)
