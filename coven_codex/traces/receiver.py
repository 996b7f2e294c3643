"""A local OTLP/HTTP receiver: Codex's exports in, one JSONL record per export out.

:class:`OtlpReceiver` listens on 127.0.0.1 (loopback only) and answers ``POST /v1/logs``,
``/v1/traces`` and ``/v1/metrics`` with the OTLP/HTTP success response in the request's own
encoding (``application/json`` or ``application/x-protobuf``, gzip or deflate allowed), after the
decoded payload (:mod:`coven_codex.traces.records`) has been written by its sink (a
:class:`~coven_codex.traces.writer.JsonlWriter`, or the daemon's
:class:`~coven_codex.traces.routing.ThreadRouter`). What it cannot use it refuses and keeps serving:

- a post without this receiver's secret (a random value made per receiver, which Codex sends as
  the :data:`~coven_codex.traces.otel_config.SECRET_HEADER` header because :attr:`OtlpReceiver.target`
  puts it into its exporter config): ``401``, and the connection is closed;
- a body over ``max_body`` bytes: ``413``, and the connection is closed without reading it; one
  that inflates past ``max_body``: ``413`` as soon as it does (inflation stops there);
- a payload that does not decode, or JSON nested deeper than
  :data:`~coven_codex.traces.records.MAX_DEPTH`: ``400``; an unknown ``Content-Type``, an unknown
  or stacked ``Content-Encoding`` (``gzip, gzip``): ``415``;
- another path: ``404``; another method: ``405``; something that is not HTTP: the connection is closed.

Inflating and decoding run in a worker thread, so a large payload does not hold up other
requests. Refusals are logged once per kind (the first one, with a short reason), and counted; the counts are
logged once more when the receiver stops. Leaving ``async with`` closes every connection and
flushes and fsyncs the file.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
import zlib
from collections import Counter

from pydantic import JsonValue

from coven_codex.support import http11
from coven_codex.support.listener import BoundedListener
from coven_codex.traces.otel_config import SECRET_HEADER, OtlpTarget
from coven_codex.traces.records import (
    SIGNALS,
    Encoding,
    PayloadError,
    Signal,
    decode_payload,
    encoding_of,
    make_record,
)
from coven_codex.traces.writer import RecordSink

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
MAX_BODY_BYTES = 64 * 2**20
"""Larger than any export seen: 0.169.0's spans for one short run are about 1 MB as JSON."""
_REASON_CHARS = 160


class OtlpReceiver(BoundedListener):
    """Serve OTLP/HTTP on ``127.0.0.1:port`` (0: any free port) and write every export to ``sink``."""

    name = "the OTLP receiver"
    purpose = "listen for OpenTelemetry data"
    remedy = "pick another --otel-port, or 0 for any free port"

    def __init__(self, sink: RecordSink, *, port: int = 0, max_body: int = MAX_BODY_BYTES) -> None:
        super().__init__(HOST, port)
        self.sink = sink
        self.max_body = max_body
        self.accepted: Counter[str] = Counter()
        self.refused: Counter[int] = Counter()
        self._write_lock = asyncio.Lock()
        self._secret = secrets.token_urlsafe(32).encode("ascii")

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``; the signals are under ``/v1/``."""
        return f"http://{HOST}:{self.port}"

    @property
    def target(self) -> OtlpTarget:
        """Where and how Codex must post: the base URL and the header carrying this run's secret."""
        return OtlpTarget(self.base_url, {SECRET_HEADER: self._secret.decode("ascii")})

    async def aclose(self) -> None:
        """Stop listening, end every connection (bounded by :data:`~coven_codex.support.listener.CLOSE_WAIT`),
        flush the file."""
        await super().aclose()
        await asyncio.to_thread(self.sink.close)
        if self.refused:
            shown = ", ".join(f"{count} with {status}" for status, count in sorted(self.refused.items()))
            log.warning("the OTLP receiver refused %d payload(s): %s", self.refused.total(), shown)

    async def _converse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                request = await http11.read_request(reader, writer, max_body=self.max_body)
            except http11.BodyTooLargeError as exc:
                await self._answer(writer, 413, f"payload too large: {exc}", keep_alive=False)
                return
            except (http11.HttpProtocolError, asyncio.IncompleteReadError, ValueError) as exc:
                self._refuse(400, f"not HTTP/1.1: {exc}")
                return
            if request is None:
                return
            keep_alive = await self._handle(request, writer)
            if not keep_alive:
                return

    async def _handle(self, request: http11.HttpRequest, writer: asyncio.StreamWriter) -> bool:
        keep = request.keep_alive
        signal = SIGNALS.get(request.target.split("?", 1)[0])
        if signal is None:
            return await self._answer(writer, 404, f"no OTLP signal at {request.target[:80]}", keep_alive=keep)
        if request.method != "POST":
            return await self._answer(writer, 405, f"{request.method} is not POST", keep_alive=keep)
        if not hmac.compare_digest(request.headers.get(SECRET_HEADER, "").encode("latin-1"), self._secret):
            return await self._answer(
                writer,
                401,
                f"no valid {SECRET_HEADER} header: only the Codex this run started may post here",
                keep_alive=False,
            )
        encoding = encoding_of(request.headers.get("content-type", ""))
        if encoding is None:
            shown = request.headers.get("content-type", "(none)")[:80]
            return await self._answer(writer, 415, f"unsupported Content-Type {shown}", keep_alive=keep)
        try:
            payload = await asyncio.to_thread(self._decode, signal, encoding, request)
        except http11.UnsupportedEncodingError as exc:
            return await self._answer(writer, 415, f"unsupported Content-Encoding {str(exc)[:80]}", keep_alive=keep)
        except http11.BodyTooLargeError as exc:
            return await self._answer(writer, 413, f"payload too large: {exc}", keep_alive=False)
        except (OSError, EOFError, zlib.error) as exc:
            return await self._answer(writer, 400, f"body does not decompress: {exc}", keep_alive=keep)
        except PayloadError as exc:
            return await self._answer(writer, 400, str(exc), keep_alive=keep)
        record = make_record(signal, encoding, payload)
        async with self._write_lock:
            await asyncio.to_thread(self.sink.write, record)
        self.accepted[signal] += 1
        success = (b"", "application/x-protobuf") if encoding == "protobuf" else (b"{}", "application/json")
        writer.write(http11.full_response(200, success[0], success[1], keep_alive=keep))
        await writer.drain()
        return keep

    def _decode(self, signal: Signal, encoding: Encoding, request: http11.HttpRequest) -> dict[str, JsonValue]:
        """The payload of ``request`` (in a worker thread: inflating and parsing take a while)."""
        body = http11.decode_body(request.body, request.headers.get("content-encoding", ""), limit=self.max_body)
        return decode_payload(signal, encoding, body)

    async def _answer(self, writer: asyncio.StreamWriter, status: int, reason: str, *, keep_alive: bool) -> bool:
        self._refuse(status, reason)
        body = reason[:_REASON_CHARS].encode("utf-8", "replace")
        writer.write(http11.full_response(status, body, "text/plain; charset=utf-8", keep_alive=keep_alive))
        await writer.drain()
        return keep_alive

    def _refuse(self, status: int, reason: str) -> None:
        if not self.refused[status]:
            log.warning("the OTLP receiver refused a payload (%d: %s)", status, reason[:_REASON_CHARS])
        self.refused[status] += 1
