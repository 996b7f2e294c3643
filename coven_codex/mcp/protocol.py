"""JSON-RPC 2.0 / MCP message shapes, error codes and protocol versions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Newest first. The handshake-era revisions; 2026-07-28 (server/discover) is not offered.
SUPPORTED_PROTOCOL_VERSIONS: tuple[str, ...] = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
LATEST_PROTOCOL_VERSION = SUPPORTED_PROTOCOL_VERSIONS[0]

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

RequestId = str | int | float


@dataclass(frozen=True, slots=True)
class Request:
    """A JSON-RPC request (it has an id and wants a response); ``message`` is the whole message."""

    id: RequestId
    method: str
    params: Any
    message: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Notification:
    """A JSON-RPC notification (no id, no response); ``params`` is ``{}`` when absent."""

    method: str
    params: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ClientResponse:
    """A response from the client (this server sends no requests, so it is only logged)."""

    id: Any


@dataclass(frozen=True, slots=True)
class Invalid:
    """A message that breaks JSON-RPC 2.0; ``message`` says how (the error response carries ``id`` if known)."""

    id: RequestId | None
    message: str


Message = Request | Notification | ClientResponse | Invalid


def is_request_id(value: object) -> bool:
    """``value`` may be a request id: a string or a number (not a bool, not null)."""
    return isinstance(value, str | int | float) and not isinstance(value, bool)


def id_key(value: RequestId) -> tuple[bool, RequestId]:
    """A dict key for an id that keeps ``"1"`` and ``1`` apart."""
    return (isinstance(value, str), value)


def classify(value: Any) -> Message:
    """What a parsed JSON value is, as JSON-RPC 2.0 sees it (MCP forbids null ids)."""
    if isinstance(value, list):
        return Invalid(None, "JSON-RPC batches are not supported (MCP 2025-06-18 removed them)")
    if not isinstance(value, dict):
        return Invalid(None, "a JSON-RPC message must be a JSON object")
    raw_id = value.get("id")
    echo = raw_id if is_request_id(raw_id) else None
    if value.get("jsonrpc") != "2.0":
        return Invalid(echo, 'the "jsonrpc" member must be exactly "2.0"')
    method = value.get("method")
    if method is None and ("result" in value or "error" in value):
        return ClientResponse(raw_id)
    if not isinstance(method, str):
        return Invalid(echo, 'the "method" member must be a string')
    params = value.get("params")
    if "params" in value and not isinstance(params, dict | list):
        return Invalid(echo, 'the "params" member must be an object')
    if "id" not in value:
        return Notification(method, params if isinstance(params, dict) else {})
    if echo is None:
        return Invalid(None, "a request id must be a string or a number (MCP forbids null)")
    return Request(echo, method, params, value)


def error_response(request_id: RequestId | None, code: int, message: str, data: Any = None) -> dict[str, Any]:
    """A JSON-RPC error response to ``request_id``."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def result_response(request_id: RequestId, result: Any) -> dict[str, Any]:
    """A JSON-RPC success response to ``request_id``."""
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def negotiate_version(requested: str) -> str:
    """The requested version if supported, else the newest this server speaks (MCP lifecycle)."""
    return requested if requested in SUPPORTED_PROTOCOL_VERSIONS else LATEST_PROTOCOL_VERSION
