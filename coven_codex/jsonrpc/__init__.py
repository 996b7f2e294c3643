"""One JSON-RPC peer for the protocols coven speaks over newline-delimited JSON.

:mod:`coven_codex.jsonrpc.messages` holds the typed messages (requests, notifications, responses
and errors as pydantic models, values as :data:`pydantic.JsonValue`, never ``Any``);
:mod:`coven_codex.jsonrpc.peer` the peer: request ids, the pending requests' futures with bounded
waits, and the routing of what arrives (responses to their futures, requests and notifications
to the owner's handlers). The owner keeps the transport (a process's pipes, a socket) and says
how to write a line. Used by the Codex app-server client (:mod:`coven_codex.codex.appserver`).
"""

from coven_codex.jsonrpc.messages import (
    ErrorBody,
    ErrorResponse,
    Incoming,
    Notification,
    Request,
    RequestId,
    Response,
)
from coven_codex.jsonrpc.peer import JsonRpcPeer, RequestTimeout, RpcError

__all__ = [
    "ErrorBody",
    "ErrorResponse",
    "Incoming",
    "JsonRpcPeer",
    "Notification",
    "Request",
    "RequestId",
    "RequestTimeout",
    "Response",
    "RpcError",
]
