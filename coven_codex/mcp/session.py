"""One MCP session (one client connection): lifecycle state and the tools-only methods.

:meth:`McpSession.methods` is the method table the connection's JSON-RPC peer serves
(:class:`coven_codex.jsonrpc.Serving`): each handler reads its params as a typed model
(:mod:`coven_codex.mcp.messages`; params that do not fit are ``-32602``), checks the MCP
lifecycle (``-32600`` before ``initialize`` or for a second one) and returns its result model
on the wire. An unknown method is the peer's ``-32601``; a handler's unexpected failure its bare
internal error (the traceback goes to the log, never to the client).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from typing import TypeVar

from pydantic import BaseModel, JsonValue, ValidationError

from coven_codex import __version__
from coven_codex.jsonrpc import INVALID_PARAMS, INVALID_REQUEST, RpcError, ServedRequest
from coven_codex.jsonrpc.peer import Handler
from coven_codex.mcp.context import SpellContext
from coven_codex.mcp.invoke import call_spell
from coven_codex.mcp.messages import (
    SUPPORTED_PROTOCOL_VERSIONS,
    CallToolParams,
    Implementation,
    InitializeParams,
    InitializeResult,
    ListToolsParams,
    ListToolsResult,
    ProgressParams,
    negotiate_version,
    wire,
)
from coven_codex.mcp.outcomes import SpellOutcomes, recent_outcomes
from coven_codex.mcp.registry import SpellRegistry
from coven_codex.mcp.schema import describe_validation_error
from coven_codex.support.limits import cut

log = logging.getLogger(__name__)

SpellCallHook = Callable[[str, bool, float], None]
"""Called when a spell call ends: its name, whether its result is an error, its seconds."""

Notify = Callable[[str, Mapping[str, JsonValue]], None]
"""Queues a notification to the client (progress while a call runs)."""
P = TypeVar("P", bound=BaseModel)
MAX_PARAMS_ERROR = 500


def read_params(model: type[P], request: ServedRequest) -> P:
    """``request``'s params as ``model``; :class:`RpcError` ``-32602`` saying what does not fit."""
    try:
        return model.model_validate(request.params)
    except ValidationError as exc:
        why = describe_validation_error(exc)
        raise RpcError(
            "Invalid params", INVALID_PARAMS, why if len(why) <= MAX_PARAMS_ERROR else why[: MAX_PARAMS_ERROR - 1] + "…"
        ) from None


class McpSession:
    """The MCP state of one connection and its methods."""

    def __init__(
        self,
        registry: SpellRegistry,
        *,
        executor: Executor | None = None,
        server_name: str = "coven",
        label: str = "",
        page_size: int = 100,
        instructions: str | None = None,
        outcomes: SpellOutcomes | None = None,
        on_call: SpellCallHook | None = None,
    ) -> None:
        """``label`` names the session to spells (:attr:`SpellContext.session`); ``page_size``:
        tools per ``tools/list`` page; ``instructions``: told to the client at ``initialize``."""
        self.registry = registry
        self.outcomes = outcomes if outcomes is not None else recent_outcomes
        self.on_call = on_call
        """Told of each spell call's end: the spell, whether it failed, its seconds (the metrics)."""
        self.executor = executor
        self.server_name = server_name
        self.label = label
        self.page_size = max(1, page_size)
        self.instructions = instructions
        self.protocol_version: str | None = None
        self.client_info = Implementation()
        self.initialized = False

    def methods(self, notify: Notify) -> dict[str, Handler]:
        """The method table for the peer; ``notify`` sends the progress of ``tools/call``."""

        async def tools_call(request: ServedRequest) -> JsonValue:
            return await self._tools_call(request, notify)

        table: dict[str, Handler] = {
            "initialize": self._initialize,
            "ping": self._ping,
            "tools/list": self._tools_list,
            "tools/call": tools_call,
        }
        return {method: self._in_lifecycle(method, handler) for method, handler in table.items()}

    def _in_lifecycle(self, method: str, handler: Handler) -> Handler:
        async def checked(request: ServedRequest) -> JsonValue:
            refusal = self._lifecycle_refusal(method)
            if refusal is not None:
                raise RpcError(refusal, INVALID_REQUEST)
            return await handler(request)

        return checked

    def _lifecycle_refusal(self, method: str) -> str | None:
        """Why ``method`` cannot run in this session's state (MCP lifecycle), or None."""
        if method == "initialize" and self.protocol_version is not None:
            return (
                f"Invalid request: this session is already initialised (protocol {self.protocol_version}); "
                "open a new connection to start over"
            )
        if self.protocol_version is None and method not in ("initialize", "ping"):
            return (
                f"Invalid request: {method} before initialize; send initialize first (this server "
                f"speaks MCP {', '.join(SUPPORTED_PROTOCOL_VERSIONS)}, which all begin with it)"
            )
        return None

    def notification(self, method: str, params: Mapping[str, JsonValue]) -> None:
        """Handle a client notification other than ``notifications/cancelled``."""
        if method == "notifications/initialized":
            self.initialized = True
        elif method not in ("notifications/progress", "notifications/roots/list_changed"):
            log.debug("ignoring MCP notification %s", cut(method))

    async def _initialize(self, request: ServedRequest) -> JsonValue:
        params = read_params(InitializeParams, request)
        self.client_info = params.clientInfo
        self.protocol_version = negotiate_version(params.protocolVersion)
        log.info(
            "MCP client %s %s connected (protocol %s, asked for %s)",
            cut(self.client_info.name),
            cut(self.client_info.version),
            self.protocol_version,
            cut(params.protocolVersion),
        )
        result = InitializeResult(
            protocolVersion=self.protocol_version,
            serverInfo=Implementation(name=self.server_name, version=__version__),
            instructions=self.instructions or None,
        )
        return wire(result)

    async def _ping(self, request: ServedRequest) -> JsonValue:
        return {}

    async def _tools_list(self, request: ServedRequest) -> JsonValue:
        params = read_params(ListToolsParams, request)
        start = 0
        if params.cursor is not None:
            decoded = _decode_cursor(params.cursor)
            if decoded is None:
                raise RpcError("Invalid cursor", INVALID_PARAMS, "pass back a nextCursor from tools/list")
            start = decoded
        tools = self.registry.tool_definitions()
        page = tools[start : start + self.page_size]
        end = start + len(page)
        result = ListToolsResult(tools=page, nextCursor=_encode_cursor(end) if end < len(tools) else None)
        return wire(result)

    async def _tools_call(self, request: ServedRequest, notify: Notify) -> JsonValue:
        params = read_params(CallToolParams, request)
        spell = self.registry.get(params.name)
        if spell is None:
            raise RpcError(f"Unknown tool: {cut(params.name, 200)}", INVALID_PARAMS)
        token = params.progress_token()
        sink = None
        if token is not None:
            refused: list[str] = []

            def sink(progress: float, total: float | None, message: str | None) -> None:
                try:
                    update = ProgressParams(progressToken=token, progress=progress, total=total, message=message)
                    notify("notifications/progress", wire(update))
                except (ValidationError, ValueError) as exc:  # not a JSON number (NaN, a string...)
                    if not refused:  # once per call, not once per report
                        refused.append(params.name)
                        log.warning(
                            "spell %s reported progress that JSON cannot carry (%s); dropped",
                            params.name,
                            type(exc).__name__,
                        )

        context = SpellContext(
            spell_name=params.name,
            session=self.label,
            meta=params.meta,
            progress_sink=sink,
            loop=asyncio.get_running_loop(),
        )
        started = time.perf_counter()
        result = await call_spell(spell, params.arguments, context, self.executor)
        if self.on_call is not None:
            self.on_call(params.name, result.isError, time.perf_counter() - started)
        self.outcomes.record(params.name, params.arguments, result)
        return wire(result)


def _encode_cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(f"tools:{offset}".encode()).decode()


def _decode_cursor(cursor: JsonValue) -> int | None:
    if not isinstance(cursor, str):
        return None
    try:
        text = base64.urlsafe_b64decode(cursor.encode()).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    prefix, _, number = text.partition(":")
    if prefix != "tools" or not number.isdigit():
        return None
    return int(number)
