"""One JSON-RPC peer for the protocols coven speaks over newline-delimited JSON.

:mod:`coven_codex.jsonrpc.messages` holds the typed messages (requests, notifications, responses
and errors as pydantic models, values as :data:`pydantic.JsonValue`, never ``Any``), the error
codes and the reading of a line (:func:`~coven_codex.jsonrpc.messages.parse`);
:mod:`coven_codex.jsonrpc.framing` splits a byte stream into lines without holding an oversized
one; :mod:`coven_codex.jsonrpc.peer` is the peer: request ids, the pending requests' futures with
bounded waits, the routing of what arrives, and serving the other side's requests from a method
table (:class:`Serving`). The owner keeps the transport (a process's pipes, a socket) and says
how to write a line. Used by the Codex app-server client (:mod:`coven_codex.codex.appserver`) and
the MCP server (:mod:`coven_codex.mcp`, also behind ``coven-codex mcp-serve``).
"""

from coven_codex.jsonrpc.framing import OVERSIZED, FrameDecoder
from coven_codex.jsonrpc.messages import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    ErrorBody,
    ErrorResponse,
    Incoming,
    Invalid,
    Notification,
    Request,
    RequestId,
    Response,
)
from coven_codex.jsonrpc.peer import JsonRpcPeer, RequestTimeout, RpcError, ServedRequest, Serving

__all__ = [
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "OVERSIZED",
    "PARSE_ERROR",
    "ErrorBody",
    "ErrorResponse",
    "FrameDecoder",
    "Incoming",
    "Invalid",
    "JsonRpcPeer",
    "Notification",
    "Request",
    "RequestId",
    "RequestTimeout",
    "Response",
    "RpcError",
    "ServedRequest",
    "Serving",
]
