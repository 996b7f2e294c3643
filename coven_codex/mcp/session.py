"""One MCP session (one client connection): lifecycle state and the tools-only methods.

Method dispatch goes through jsonrpcserver (method table, ``-32601`` for unknown methods,
``-32602`` when params do not bind). Around it, :mod:`coven_codex.mcp.connection` does what
jsonrpcserver cannot: parse once and echo ids of invalid requests, track requests in flight for
``notifications/cancelled``, send progress notifications, and never leak exception text
(jsonrpcserver puts ``str(exc)`` into internal errors, so every method here catches its own).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from jsonrpcserver import Error, InvalidParams, Result, Success, async_dispatch_to_serializable

from coven_codex import __version__
from coven_codex.mcp.context import SpellContext
from coven_codex.mcp.invoke import call_spell
from coven_codex.mcp.outcomes import SpellOutcomes, recent_outcomes
from coven_codex.mcp.protocol import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    SUPPORTED_PROTOCOL_VERSIONS,
    Request,
    RequestId,
    error_response,
    negotiate_version,
)
from coven_codex.mcp.registry import SpellRegistry

log = logging.getLogger(__name__)

SendMessage = Callable[[dict[str, Any]], None]
Method = Callable[..., Awaitable[Result]]


@dataclass(slots=True)
class RequestContext:
    """What a method needs to know about the request it serves (jsonrpcserver's ``context``)."""

    request_id: RequestId
    send: SendMessage
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def progress_token(self) -> str | int | float | None:
        """The client's ``progressToken`` (MCP allows ``string | number``), or None."""
        token = self.meta.get("progressToken")
        return token if isinstance(token, str | int | float) and not isinstance(token, bool) else None


def _guarded(method: Method) -> Method:
    """Turn an unexpected exception into a bare internal error (the traceback goes to the log)."""

    async def guarded(request: RequestContext, /, **params: Any) -> Result:
        try:
            return await method(request, **params)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("MCP method %s failed", getattr(method, "__name__", "?"))
            return Error(INTERNAL_ERROR, "internal error in the coven MCP server; see the daemon log")

    return guarded


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
    ) -> None:
        self.registry = registry
        self.outcomes = outcomes if outcomes is not None else recent_outcomes
        self.executor = executor
        self.server_name = server_name
        self.label = label
        self.page_size = max(1, page_size)
        self.instructions = instructions
        self.protocol_version: str | None = None
        self.client_info: dict[str, Any] = {}
        self.initialized = False
        self.methods: dict[str, Method] = {
            "initialize": _guarded(self._initialize),
            "ping": _guarded(self._ping),
            "tools/list": _guarded(self._tools_list),
            "tools/call": _guarded(self._tools_call),
        }

    async def handle(self, request: Request, send: SendMessage) -> dict[str, Any]:
        """The response message for ``request`` (cancellation propagates: then no response)."""
        refusal = self._lifecycle_refusal(request.method)
        if refusal is not None:
            return error_response(request.id, INVALID_REQUEST, refusal)
        params = request.params if isinstance(request.params, dict) else {}
        meta = params.get("_meta")
        context = RequestContext(request.id, send, meta if isinstance(meta, dict) else {})
        response = await async_dispatch_to_serializable(
            "",
            methods=self.methods,
            context=context,
            deserializer=lambda _: request.message,
            validator=lambda parsed: parsed,
        )
        if not isinstance(response, dict):  # cannot happen for a request with an id
            log.error("jsonrpcserver gave no single response for request %r", request.id)
            return error_response(request.id, INTERNAL_ERROR, "internal error in the coven MCP server")
        response["id"] = request.id
        return response

    def _lifecycle_refusal(self, method: str) -> str | None:
        """Why ``method`` cannot run in this session's state (MCP lifecycle), or None."""
        if method == "initialize" and self.protocol_version is not None:
            return (
                f"Invalid request: this session is already initialised (protocol {self.protocol_version}); "
                "open a new connection to start over"
            )
        if self.protocol_version is None and method in self.methods and method not in ("initialize", "ping"):
            return (
                f"Invalid request: {method} before initialize; send initialize first (this server "
                f"speaks MCP {', '.join(SUPPORTED_PROTOCOL_VERSIONS)}, which all begin with it)"
            )
        return None

    def notification(self, method: str, params: Mapping[str, Any]) -> None:
        """Handle a client notification other than ``notifications/cancelled``."""
        if method == "notifications/initialized":
            self.initialized = True
        elif method in ("notifications/progress", "notifications/roots/list_changed"):
            return
        else:
            log.debug("ignoring MCP notification %s", method)

    async def _initialize(self, request: RequestContext, /, **params: Any) -> Result:
        requested = params.get("protocolVersion")
        if not isinstance(requested, str):
            return InvalidParams('"protocolVersion" must be a string')
        client_info = params.get("clientInfo")
        self.client_info = client_info if isinstance(client_info, dict) else {}
        self.protocol_version = negotiate_version(requested)
        log.info(
            "MCP client %s %s connected (protocol %s, asked for %s)",
            self.client_info.get("name", "?"),
            self.client_info.get("version", "?"),
            self.protocol_version,
            requested,
        )
        result: dict[str, Any] = {
            "protocolVersion": self.protocol_version,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": self.server_name, "version": __version__},
        }
        if self.instructions:
            result["instructions"] = self.instructions
        return Success(result)

    async def _ping(self, request: RequestContext, /, **params: Any) -> Result:
        return Success({})

    async def _tools_list(self, request: RequestContext, /, **params: Any) -> Result:
        cursor = params.get("cursor")
        start = 0
        if cursor is not None:
            decoded = _decode_cursor(cursor)
            if decoded is None:
                return Error(INVALID_PARAMS, "Invalid cursor", "pass back a nextCursor from tools/list")
            start = decoded
        tools = self.registry.tool_definitions()
        page = tools[start : start + self.page_size]
        result: dict[str, Any] = {"tools": page}
        end = start + len(page)
        if end < len(tools):
            result["nextCursor"] = _encode_cursor(end)
        return Success(result)

    async def _tools_call(self, request: RequestContext, /, **params: Any) -> Result:
        name = params.get("name")
        if not isinstance(name, str):
            return InvalidParams('"name" must be the name of a tool from tools/list')
        arguments = params.get("arguments")
        if arguments is not None and not isinstance(arguments, dict):
            return InvalidParams('"arguments" must be an object')
        spell = self.registry.get(name)
        if spell is None:
            return Error(INVALID_PARAMS, f"Unknown tool: {name}")
        token = request.progress_token
        sink = None
        if token is not None:
            send = request.send

            def sink(progress: float, total: float | None, message: str | None) -> None:
                params: dict[str, Any] = {"progressToken": token, "progress": progress}
                if total is not None:
                    params["total"] = total
                if message is not None:
                    params["message"] = message
                send({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})

        context = SpellContext(
            spell_name=name,
            session=self.label,
            meta=request.meta,
            progress_sink=sink,
            loop=asyncio.get_running_loop(),
        )
        result = await call_spell(spell, arguments, context, self.executor)
        self.outcomes.record(name, arguments, result)
        return Success(result)


def _encode_cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(f"tools:{offset}".encode()).decode()


def _decode_cursor(cursor: object) -> int | None:
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
