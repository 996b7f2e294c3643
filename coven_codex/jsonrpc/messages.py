"""JSON-RPC messages as typed models, one JSON object per line.

Outgoing messages are built as :class:`Request`, :class:`Notification`, :class:`Response` or
:class:`ErrorResponse` and encoded by :func:`encode` (compact, UTF-8, ``\\n``-ended; with the
``"jsonrpc": "2.0"`` member or without it: the Codex app-server neither sends nor needs it).
What arrives is read by :func:`parse`: an :class:`Incoming` envelope, told apart by
:meth:`Incoming.kind`, or an :class:`Invalid` saying which error code and message it earns.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, JsonValue, StrictFloat, StrictInt, StrictStr, ValidationError

RequestId = StrictInt | StrictFloat | StrictStr
"""A request id: a string or a number, never a bool or ``null``; it comes back with the type it had."""

PARSE_ERROR = -32700
"""The line is not JSON."""
INVALID_REQUEST = -32600
"""The JSON is no valid JSON-RPC message (or a request the receiver refuses in its state)."""
METHOD_NOT_FOUND = -32601
"""The JSON-RPC error code for a method the receiver does not handle."""
INVALID_PARAMS = -32602
"""The params do not fit the method."""
INTERNAL_ERROR = -32603
"""The receiver failed; the details are in its log, not in the answer."""


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
    """``message`` as one ``\\n``-ended line (``params`` left out when it is ``None``); raises
    ``ValueError`` for a value JSON cannot carry (``NaN``, ``Infinity``)."""
    data = message.model_dump(mode="json", exclude_none=isinstance(message, Request | Notification))
    if isinstance(message, ErrorResponse) and message.error.data is None:
        data["error"].pop("data", None)
    if jsonrpc_member:
        data = {"jsonrpc": "2.0", **data}
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8") + b"\n"


class Incoming(BaseModel):
    """One message that arrived, before it is told apart (:meth:`kind`)."""

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


class Invalid(BaseModel):
    """A line that is no acceptable JSON-RPC message: the error it is answered with (``id``: the
    request's id where it can be read, else ``None``)."""

    id: RequestId | None
    code: int
    message: str


def _no_constants(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def parse(line: bytes, *, jsonrpc_member: bool) -> Incoming | Invalid:
    """Read one line. ``jsonrpc_member``: the message must carry ``"jsonrpc": "2.0"`` (JSON-RPC 2.0
    proper; the Codex app-server leaves it out). ``NaN`` and ``Infinity``, which Python's json
    accepts, are parse errors; batches are refused (no protocol coven speaks uses them)."""
    try:
        value: JsonValue = json.loads(line, parse_constant=_no_constants)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return Invalid(id=None, code=PARSE_ERROR, message="Parse error: the message is not valid JSON")
    return classify(value, jsonrpc_member=jsonrpc_member)


def _request_id(value: JsonValue) -> int | float | str | None:
    return value if isinstance(value, int | float | str) and not isinstance(value, bool) else None


def classify(value: JsonValue, *, jsonrpc_member: bool) -> Incoming | Invalid:
    """What a parsed JSON value is, as JSON-RPC 2.0 sees it (see :func:`parse`)."""
    if isinstance(value, list):
        return Invalid(id=None, code=INVALID_REQUEST, message="Invalid request: JSON-RPC batches are not supported")
    if not isinstance(value, dict):
        return Invalid(id=None, code=INVALID_REQUEST, message="Invalid request: a JSON-RPC message must be an object")
    echo = _request_id(value.get("id"))

    def invalid(why: str, code: int = INVALID_REQUEST) -> Invalid:
        return Invalid(id=echo, code=code, message=f"Invalid request: {why}")

    if jsonrpc_member and value.get("jsonrpc") != "2.0":
        return invalid('the "jsonrpc" member must be exactly "2.0"')
    method = value.get("method")
    if method is None and ("result" in value or "error" in value):
        try:
            return Incoming.model_validate({"id": echo, "result": value.get("result"), "error": value.get("error")})
        except ValidationError:
            return Incoming(id=echo, error=ErrorBody(message="a malformed error response"))
    if not isinstance(method, str):
        return invalid('the "method" member must be a string')
    params = value.get("params")
    if params is not None and not isinstance(params, dict):
        if not isinstance(params, list):
            return invalid('the "params" member must be an object')
        if "id" in value:  # positional params are JSON-RPC, but no method here takes them
            return Invalid(id=echo, code=INVALID_PARAMS, message="Invalid params: params must be an object")
        params = None
    if "id" in value and echo is None:
        return invalid("a request id must be a string or a number (not null)")
    return Incoming(id=echo, method=method, params=params)
