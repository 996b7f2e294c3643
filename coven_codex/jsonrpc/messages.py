"""JSON-RPC messages as typed models, one JSON object per line.

Outgoing messages are built as :class:`Request`, :class:`Notification`, :class:`Response` or
:class:`ErrorResponse` and encoded by :func:`encode` (compact, UTF-8, ``\\n``-ended; with the
``"jsonrpc": "2.0"`` member or without it: the Codex app-server neither sends nor needs it).
What arrives is read as an :class:`Incoming` envelope and told apart by :meth:`Incoming.kind`.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, JsonValue

RequestId = int | str

METHOD_NOT_FOUND = -32601
"""The JSON-RPC error code for a method the receiver does not handle."""


class ErrorBody(BaseModel):
    """The ``error`` member of an error response."""

    model_config = ConfigDict(extra="ignore")
    code: int | None = None
    message: str = ""
    data: JsonValue = None


class Request(BaseModel):
    """A request: answered by a :class:`Response` or an :class:`ErrorResponse` with the same ``id``."""

    id: RequestId
    method: str
    params: dict[str, JsonValue] | None = None


class Notification(BaseModel):
    """A message that gets no answer."""

    method: str
    params: dict[str, JsonValue] | None = None


class Response(BaseModel):
    """The successful answer to the request ``id``."""

    id: RequestId
    result: JsonValue


class ErrorResponse(BaseModel):
    """The failed answer to the request ``id``."""

    id: RequestId | None
    error: ErrorBody


Outgoing = Request | Notification | Response | ErrorResponse


def encode(message: Outgoing, *, jsonrpc_member: bool = False) -> bytes:
    """``message`` as one ``\\n``-ended line (``params`` left out when it is ``None``)."""
    data = message.model_dump(mode="json", exclude_none=isinstance(message, Request | Notification))
    if isinstance(message, ErrorResponse) and message.error.data is None:
        data["error"].pop("data", None)
    if jsonrpc_member:
        data = {"jsonrpc": "2.0", **data}
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


class Incoming(BaseModel):
    """One line that arrived, before it is told apart (:meth:`kind`)."""

    model_config = ConfigDict(extra="ignore")
    id: RequestId | None = None
    method: str | None = None
    params: dict[str, JsonValue] | None = None
    result: JsonValue = None
    error: ErrorBody | None = None

    def kind(self) -> Literal["request", "notification", "response"]:
        """A request (``id`` and ``method``), a notification (``method`` only) or a response (no ``method``)."""
        if self.method is None:
            return "response"
        return "notification" if self.id is None else "request"
