"""A scripted model server: the OpenAI Responses API over SSE, on 127.0.0.1, for driving
the real Codex CLI offline (tests and ``coven-codex demo``).

Usage::

    from coven_codex.testing import (ScriptedModelServer, Reply, CallTool, HttpError,
                                     write_codex_config)

    async with ScriptedModelServer([Reply("hello"), CallTool("echo.echo", {"text": "x"}),
                                    Reply("done")]) as server:
        env = write_codex_config(codex_home, server.base_url)      # CODEX_HOME + key var
        ... run `codex exec --json --skip-git-repo-check "hi"` with env ...
        await server.requests.wait_for(1)
        assert server.requests.turn_prompts() == ["hi"]

Script: every ``POST /v1/responses`` takes the next entry of the script, a *turn script*:
one step or a sequence of steps (see :mod:`coven_codex.testing.steps`): ``Reply(text)``,
``Reasoning(summary)``, ``CallTool(name, arguments)``, ``RunCommand(cmd)``,
``OutputItem(item)`` (any other output item), ``HttpError(status)``, ``ErrorEvent(message)``,
``Stall(seconds)``, ``Disconnect()``.
A tool call and the model's answer to the tool result are two requests, so two entries:
``[CallTool(...), Reply("done")]`` as a list of entries, versus ``(Reasoning("r"),
Reply("t"))`` (a tuple inside the list) for two items in one response.
When the script runs out, ``responder(request)`` decides (default: a reply saying the script
is exhausted; :func:`~coven_codex.testing.responders.echo_responder` echoes the prompt).
``server.add(...)`` appends entries while it runs.

Recording: ``server.requests`` (:class:`~coven_codex.testing.request_log.RequestLog`) holds
every request (including other endpoints) with ``user_texts()``, ``turn_prompts()``,
``function_call_outputs()``, ``responses_requests()`` and ``await wait_for(n)``.

Out of process: ``coven-codex model-server --port 0 --script echo`` (see
:mod:`coven_codex.cli.model_server`) prints the base URL (``http://127.0.0.1:PORT/v1``) as its
first stdout line, then the base Codex config to use, and serves until SIGINT/SIGTERM.
``--script commands`` understands ``/tool``, ``/error``, ``/fail``, ``/stall``, ``/think``
prompts (see :mod:`coven_codex.testing.responders`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import sys
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from coven_codex.support import http11
from coven_codex.testing import responses_sse as sse
from coven_codex.testing.request_log import RecordedRequest, RequestLog
from coven_codex.testing.responders import Responder
from coven_codex.testing.steps import (
    CallTool,
    Disconnect,
    ErrorEvent,
    HttpError,
    OutputItem,
    Reasoning,
    Reply,
    RunCommand,
    Stall,
    Step,
    TurnScript,
    as_steps,
)

log = logging.getLogger(__name__)

EXHAUSTED_TEXT = "[scripted model server] script exhausted"
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_exceeded",
}


def _exhausted(_request: RecordedRequest) -> TurnScript:
    log.warning("script exhausted; answering with a fixed reply")
    return Reply(EXHAUSTED_TEXT)


class ScriptedModelServer:
    """See the module docstring. Start with ``async with`` (or ``await start()`` / ``aclose()``)."""

    def __init__(
        self,
        script: Iterable[TurnScript] = (),
        *,
        responder: Responder | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        record_file: Path | None = None,
    ) -> None:
        self._script: deque[tuple[Step, ...]] = deque(as_steps(entry) for entry in script)
        self._responder: Responder = responder or _exhausted
        self._host = host
        self._port = port
        self._record_file = record_file
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._ids = sse.IdSource()
        self.requests = RequestLog()

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        """Listen on the host and port (port 0: a free one, then :attr:`port` says which)."""
        self._server = await asyncio.start_server(self._on_connection, self._host, self._port)
        self._port = self._server.sockets[0].getsockname()[1]
        log.info("scripted model server listening on %s", self.base_url)

    async def aclose(self) -> None:
        """Stop listening and cancel open connections; safe to call twice."""
        if self._server is None:
            return
        self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        await self._server.wait_closed()
        self._server = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def serve_forever(self) -> None:
        """Start if not started, then serve until cancelled."""
        if self._server is None:
            await self.start()
        assert self._server is not None
        await self._server.serve_forever()

    @property
    def port(self) -> int:
        """The port the server listens on (known after :meth:`start`)."""
        return self._port

    @property
    def base_url(self) -> str:
        """What goes into ``[model_providers.<id>].base_url``."""
        return f"http://{self._host}:{self._port}/v1"

    url = base_url

    def add(self, *entries: TurnScript) -> None:
        """Append turn scripts to the script."""
        self._script.extend(as_steps(entry) for entry in entries)

    @property
    def remaining(self) -> int:
        """Script entries not yet used."""
        return len(self._script)

    # -- connections -----------------------------------------------------------------------
    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await self._serve_connection(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            log.debug("connection ended: %s", exc)
        except http11.HttpProtocolError as exc:
            log.warning("closing connection after a protocol error: %s", exc)
        except asyncio.CancelledError:
            # Only aclose() cancels connection tasks; ending normally keeps asyncio's
            # start_server callback from logging the cancellation as an error.
            log.debug("connection closed by server shutdown")
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            request = await http11.read_request(reader, writer)
            if request is None:
                return
            try:
                body = http11.decode_body(request.body, request.headers.get("content-encoding", ""))
            except http11.UnsupportedEncodingError as exc:
                self._record(RecordedRequest(request.method, request.target, request.headers, request.body))
                await self._send_json(
                    writer, 415, {"error": {"message": f"unsupported encoding {exc}"}}, keep_alive=request.keep_alive
                )
            else:
                recorded = RecordedRequest(request.method, request.target, request.headers, body)
                self._record(recorded)
                keep_alive = await self._route(recorded, writer, keep_alive=request.keep_alive)
                if not keep_alive:
                    return
            if not request.keep_alive:
                return

    def _record(self, request: RecordedRequest) -> None:
        log.debug("%s %s (%d bytes)", request.method, request.path, len(request.body))
        self.requests.add(request)
        if self._record_file is not None:
            headers = {k: ("<redacted>" if k in {"authorization", "cookie"} else v) for k, v in request.headers.items()}
            line = {
                "method": request.method,
                "path": request.path,
                "headers": headers,
                "body": request.json if request.json is not None else request.body.decode("utf-8", "replace"),
            }
            with self._record_file.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(line) + "\n")

    async def _route(self, request: RecordedRequest, writer: asyncio.StreamWriter, *, keep_alive: bool) -> bool:
        path = request.path.split("?")[0].rstrip("/")
        if request.is_responses:
            return await self._respond(request, writer, keep_alive=keep_alive)
        if request.method == "GET" and path.endswith("/models"):
            await self._send_json(
                writer,
                200,
                {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "coven-scripted"}]},
                keep_alive=keep_alive,
            )
            return keep_alive
        log.info("unhandled request %s %s answered 404", request.method, request.path)
        await self._send_json(
            writer,
            404,
            {"error": {"message": f"no route for {request.method} {path}", "type": "not_found_error"}},
            keep_alive=keep_alive,
        )
        return keep_alive

    async def _send_json(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        payload: Any,
        *,
        keep_alive: bool,
        extra_headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        body = json.dumps(payload).encode()
        writer.write(
            http11.full_response(status, body, "application/json", keep_alive=keep_alive, extra_headers=extra_headers)
        )
        await writer.drain()

    # -- /responses ------------------------------------------------------------------------
    def _next_steps(self, request: RecordedRequest) -> tuple[Step, ...]:
        if self._script:
            steps = self._script.popleft()
        else:
            try:
                steps = as_steps(self._responder(request))
            except Exception as exc:
                log.exception("responder failed")
                return (HttpError(500, f"scripted model server: responder failed: {exc!r}"),)
        for index, step in enumerate(steps):
            if isinstance(step, HttpError) and step.times > 1:
                again = (*steps[:index], dataclasses.replace(step, times=step.times - 1), *steps[index + 1 :])
                self._script.appendleft(again)
                break
        return steps

    async def _respond(self, request: RecordedRequest, writer: asyncio.StreamWriter, *, keep_alive: bool) -> bool:
        steps = self._next_steps(request)
        http_error = next((step for step in steps if isinstance(step, HttpError)), None)
        if http_error is not None:
            for step in steps:
                if isinstance(step, Stall):
                    await asyncio.sleep(step.seconds)
            message = http_error.message or f"scripted HTTP {http_error.status}"
            error = {
                "message": message,
                "type": _ERROR_TYPES.get(http_error.status, "server_error"),
                "code": None,
                "param": None,
            }
            payload = {"error": error} if http_error.body is None else http_error.body
            await self._send_json(
                writer, http_error.status, payload, keep_alive=keep_alive, extra_headers=http_error.headers
            )
            return keep_alive
        return await self._stream(request, steps, writer)

    async def _stream(self, request: RecordedRequest, steps: tuple[Step, ...], writer: asyncio.StreamWriter) -> bool:
        """Stream one response; returns whether the connection may be reused."""
        writer.write(
            http11.response_head(
                200,
                [
                    ("content-type", "text/event-stream"),
                    ("cache-control", "no-cache"),
                    ("transfer-encoding", "chunked"),
                    ("connection", "keep-alive"),
                ],
            )
        )
        response_id = self._ids.new("resp")

        async def send(event: sse.Event) -> None:
            writer.write(http11.chunk(sse.encode_event(event)))
            await writer.drain()

        await send(sse.created(response_id))
        tools = request.tools()
        output_index = 0
        for step in steps:
            if isinstance(step, Stall):
                await asyncio.sleep(step.seconds)
            elif isinstance(step, Disconnect):
                writer.transport.abort()
                return False
            elif isinstance(step, ErrorEvent):
                if step.event == "error":
                    await send(sse.error_event(step.message, step.code))
                else:
                    await send(sse.failed(response_id, step.message, step.code))
                writer.write(http11.LAST_CHUNK)
                await writer.drain()
                return True
            elif isinstance(step, Reply):
                for event in sse.reply_events(step, self._ids.new("msg"), output_index):
                    await send(event)
                    if step.delay and event["type"] == "response.output_text.delta":
                        await asyncio.sleep(step.delay)
                output_index += 1
            elif isinstance(step, Reasoning):
                for event in sse.reasoning_events(step, self._ids.new("rs"), output_index):
                    await send(event)
                output_index += 1
            elif isinstance(step, CallTool):
                await send(sse.call_tool_event(step, tools, self._ids, output_index))
                output_index += 1
            elif isinstance(step, RunCommand):
                await send(sse.run_command_event(step, tools, self._ids, output_index))
                output_index += 1
            elif isinstance(step, OutputItem):
                for event in sse.output_item_events(step, self._ids.new("item"), output_index):
                    await send(event)
                output_index += 1
        await send(sse.completed(response_id))
        writer.write(http11.LAST_CHUNK)
        await writer.drain()
        return True


if __name__ == "__main__":  # the command is ``coven-codex model-server``; this form is kept for old scripts
    from coven_codex.cli.main import main

    raise SystemExit(main(["model-server", *sys.argv[1:]]))
