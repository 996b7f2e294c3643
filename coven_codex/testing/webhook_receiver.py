"""A webhook receiver for tests: a real HTTP server on a loopback port that checks each request's
signature and answers as scripted (a status, ``Retry-After``, or no answer at all: a hang).

```python
async with WebhookReceiver(secret, answers=[500, (429, {"Retry-After": "1"}), HANG]) as receiver:
    ...  # point a webhook target at receiver.url
    await receiver.wait_until(lambda r: len(r.acknowledged) == 3, timeout=60)
```
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from coven_codex.support.http11 import HttpProtocolError, full_response, read_request
from coven_codex.webhooks.payload import IDEMPOTENCY_HEADER, SIGNATURE_HEADER, verify

HANG: Literal["hang"] = "hang"
"""An answer that is no answer: the connection stays open, silent, until the client gives up."""

Answer = int | tuple[int, dict[str, str]] | Literal["hang"]


@dataclass(slots=True)
class Received:
    """One request the receiver got, and what it answered (``None``: it did not)."""

    body: bytes
    headers: dict[str, str]
    signature_ok: bool
    answer: int | None = None

    @property
    def key(self) -> str:
        """The ``Idempotency-Key`` header."""
        return self.headers.get(IDEMPOTENCY_HEADER.lower(), "")

    def payload(self) -> dict[str, Any]:
        """The JSON body (the payload itself, or the CloudEvent around it)."""
        data: dict[str, Any] = json.loads(self.body)
        return data


@dataclass
class WebhookReceiver:
    """Answers the n-th request with ``answers[n]`` (then ``default``), or with ``by_key[key]`` when given."""

    secret: bytes
    answers: list[Answer] = field(default_factory=list)
    default: Answer = 200
    by_key: dict[str, Answer] = field(default_factory=dict)
    received: list[Received] = field(default_factory=list)
    _server: asyncio.Server | None = None
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    _handlers: set[asyncio.Task[None]] = field(default_factory=set)

    async def __aenter__(self) -> WebhookReceiver:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>/hook``."""
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/hook"

    @property
    def acknowledged(self) -> list[Received]:
        """The requests answered with a 2xx, in the order they came."""
        return [r for r in self.received if r.answer is not None and 200 <= r.answer < 300]

    async def wait_until(self, done: Callable[[WebhookReceiver], bool], *, timeout: float) -> None:  # noqa: ASYNC109
        """Wait until ``done(self)`` holds after a request, at most ``timeout`` seconds (then ``TimeoutError``)."""
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: done(self))

    def _answer_for(self, request: Received, index: int) -> Answer:
        if request.key in self.by_key:
            return self.by_key[request.key]
        return self.answers[index] if index < len(self.answers) else self.default

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            with contextlib.suppress(HttpProtocolError, ConnectionError, asyncio.IncompleteReadError):
                while (request := await read_request(reader, writer)) is not None:
                    signature = request.headers.get(SIGNATURE_HEADER.lower(), "")
                    got = Received(request.body, request.headers, verify(self.secret, request.body, signature))
                    index = len(self.received)
                    self.received.append(got)
                    answer = self._answer_for(got, index)
                    if answer == HANG:
                        await self._notify()
                        await reader.read()  # until the client gives up and closes
                        return
                    status, headers = answer if isinstance(answer, tuple) else (answer, {})
                    got.answer = status
                    body = b'{"ok":true}' if 200 <= status < 300 else b'{"error":"scripted"}'
                    extra = tuple(headers.items())
                    writer.write(full_response(status, body, "application/json", keep_alive=False, extra_headers=extra))
                    await writer.drain()
                    await self._notify()
                    return
        finally:
            self._handlers.discard(task)
            writer.close()

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()
