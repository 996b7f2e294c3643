"""The page server's connection bounds (coven_codex/adapters/web/connections.py) on a real uvicorn:
a newcomer that finds every connection busy gets a complete, parseable 503 that says what to do."""

from __future__ import annotations

import asyncio
import http.client
from collections.abc import Awaitable, Callable
from typing import Any

import uvicorn

from coven_codex.adapters.web.connections import ConnectionLimits, guarded_protocol
from coven_codex.adapters.web.server import bind


async def test_a_newcomer_finding_every_connection_busy_gets_a_whole_503() -> None:
    release = asyncio.Event()
    serving = asyncio.Event()

    async def app(
        scope: dict[str, Any], receive: Callable[[], Awaitable[Any]], send: Callable[[dict[str, Any]], Awaitable[None]]
    ) -> None:
        assert scope["type"] in ("http", "lifespan")
        if scope["type"] == "lifespan":
            return
        serving.set()
        await release.wait()  # the first request keeps its connection busy
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, http=guarded_protocol(ConnectionLimits(per_client=1, total=1)), lifespan="off")
    server = uvicorn.Server(config)
    serving_task = asyncio.create_task(server.serve(sockets=[sock]))

    def get() -> tuple[int, bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            connection.request("GET", "/")
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    try:
        busy = asyncio.create_task(asyncio.to_thread(get))
        await asyncio.wait_for(serving.wait(), 30)
        status, body = await asyncio.to_thread(get)  # http.client reads exactly content-length bytes
        assert status == 503
        assert body == b"too many connections are busy; close some tabs and try again.\n"
        release.set()
        assert await asyncio.wait_for(busy, 30) == (200, b"ok")
    finally:
        release.set()
        server.should_exit = True
        await asyncio.wait_for(serving_task, 30)
