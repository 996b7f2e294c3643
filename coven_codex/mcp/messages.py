"""The MCP messages the spell server speaks, as typed models (tools only).

Written from the MCP schema (revisions 2024-11-05 to 2025-11-25): ``initialize``, ``ping``,
``tools/list``, ``tools/call`` and the notifications ``notifications/initialized``,
``notifications/cancelled`` and ``notifications/progress``. Fields carry the wire's names
(``_meta`` is ``meta``); models are dumped with :func:`wire`. Client messages ignore
fields the server does not use, so later revisions that add fields still parse. The JSON-RPC
envelope around them is :mod:`coven_codex.jsonrpc`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, JsonValue, StrictFloat, StrictInt, StrictStr

from coven_codex.jsonrpc import RequestId

# Newest first. The handshake-era revisions; 2026-07-28 (server/discover) is not offered.
SUPPORTED_PROTOCOL_VERSIONS: tuple[str, ...] = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
LATEST_PROTOCOL_VERSION = SUPPORTED_PROTOCOL_VERSIONS[0]

ProgressToken = StrictInt | StrictFloat | StrictStr
"""A ``progressToken``: a string or any number."""


def negotiate_version(requested: str) -> str:
    """The requested version if supported, else the newest this server speaks (MCP lifecycle)."""
    return requested if requested in SUPPORTED_PROTOCOL_VERSIONS else LATEST_PROTOCOL_VERSION


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


def wire(model: BaseModel) -> dict[str, JsonValue]:
    """``model`` as its JSON object on the wire (wire names; unset optional fields left out)."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


class RequestParams(_Model):
    """What every request's params may carry: ``_meta`` (with the client's ``progressToken``)."""

    meta: dict[str, JsonValue] = Field(default_factory=dict, alias="_meta")

    def progress_token(self) -> int | float | str | None:
        """The client's ``progressToken`` when it is a string or a number, else None."""
        token = self.meta.get("progressToken")
        return token if isinstance(token, int | float | str) and not isinstance(token, bool) else None


class Implementation(_Model):
    """``clientInfo`` / ``serverInfo``: a program's name and version."""

    name: str = "?"
    version: str = "?"


class InitializeParams(RequestParams):
    """``initialize``'s params."""

    protocolVersion: StrictStr
    capabilities: dict[str, JsonValue] = Field(default_factory=dict)
    clientInfo: Implementation = Field(default_factory=Implementation)


class ToolsCapability(_Model):
    """The server's ``tools`` capability: the tool list never changes during a session."""

    listChanged: bool = False


class ServerCapabilities(_Model):
    """What the server offers: tools only."""

    tools: ToolsCapability = Field(default_factory=ToolsCapability)


class InitializeResult(_Model):
    """``initialize``'s result."""

    protocolVersion: str
    capabilities: ServerCapabilities = Field(default_factory=ServerCapabilities)
    serverInfo: Implementation
    instructions: str | None = None


class ListToolsParams(RequestParams):
    """``tools/list``'s params: the ``nextCursor`` of the previous page, if any."""

    cursor: JsonValue = None


class ListToolsResult(_Model):
    """``tools/list``'s result: one page of ``Tool`` objects (as the registry defines them)."""

    tools: list[dict[str, JsonValue]]
    nextCursor: str | None = None


class CallToolParams(RequestParams):
    """``tools/call``'s params."""

    name: StrictStr
    arguments: dict[str, JsonValue] | None = None


class CallToolResult(_Model):
    """``tools/call``'s result; a failed spell is ``isError`` with a text saying why."""

    content: list[dict[str, JsonValue]]
    structuredContent: JsonValue = None
    isError: bool = False

    def text(self) -> str:
        """The text blocks, joined as the rollout translator joins them."""
        return "\n".join(str(block["text"]) for block in self.content if "text" in block)


def error_result(text: str) -> CallToolResult:
    """A ``CallToolResult`` reporting a failure to the model."""
    return CallToolResult(content=[{"type": "text", "text": text}], isError=True)


class ProgressParams(_Model):
    """``notifications/progress``'s params (sent while a call with a ``progressToken`` runs)."""

    progressToken: ProgressToken
    progress: int | float
    total: int | float | None = None
    message: str | None = None


class CancelledParams(_Model):
    """``notifications/cancelled``'s params: the request the client gave up."""

    requestId: RequestId
    reason: str | None = None
