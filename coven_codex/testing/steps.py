"""What one answer of the scripted model server does: a sequence of steps.

Each POST to ``/v1/responses`` is answered by one *turn script*: a single step or a
sequence of steps, played in order. Output steps (:class:`Reply`, :class:`Reasoning`,
:class:`CallTool`, :class:`RunCommand`, :class:`OutputItem`) become output items of one streamed response;
control steps shape the stream (:class:`Stall`, :class:`Disconnect`) or replace it
(:class:`HttpError`, :class:`ErrorEvent`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Reply:
    """Assistant text, streamed as ``response.output_text.delta`` pieces of ``chunk_size`` characters."""

    text: str
    chunk_size: int = 16
    delay: float = 0.0
    """Seconds to wait between two deltas (to watch a reply stream in)."""


@dataclass(frozen=True, slots=True)
class Reasoning:
    """A reasoning item whose summary is ``summary`` (streamed as summary deltas)."""

    summary: str
    chunk_size: int = 32


@dataclass(frozen=True, slots=True)
class CallTool:
    """A function call the model makes.

    ``name`` names an MCP tool as ``"server.tool"`` (also accepted: ``"server__tool"``,
    ``"mcp__server__tool"``) or a built-in tool by its plain name (``"exec_command"``).
    The server resolves it against the ``tools`` the request offered: Codex 0.169 offers
    MCP tools inside a ``{"type": "namespace", "name": "mcp__<server>"}`` group and expects
    ``name`` + ``namespace`` on the call; 0.47 offers flat ``<server>__<tool>`` functions.
    ``arguments`` is sent JSON-encoded; ``call_id`` defaults to a counter-based id.
    """

    name: str
    arguments: Any = field(default_factory=dict)
    call_id: str | None = None


def escalated_command(command: str, justification: str) -> CallTool:
    """Codex 0.169's ``exec_command`` asked to run ``command`` outside the sandbox: under an
    approval policy that asks, Codex asks for approval (with ``justification``) before it runs."""
    arguments = {
        "cmd": command,
        "sandbox_permissions": "require_escalated",
        "login": False,
        "tty": False,
        "yield_time_ms": 5000,
        "justification": justification,
    }
    return CallTool("exec_command", arguments)


@dataclass(frozen=True, slots=True)
class RunCommand:
    """A shell command call in the form the request offers.

    0.169 offers ``exec_command`` (``{"cmd": ...}``); 0.47 offers ``shell``
    (``{"command": ["bash", "-lc", ...]}``).
    """

    command: str
    call_id: str | None = None


@dataclass(frozen=True, slots=True)
class OutputItem:
    """Any other output item, sent as ``response.output_item.added`` and ``.done``: a
    ``web_search_call``, a ``custom_tool_call`` (code mode's ``exec``), an
    ``image_generation_call``… ``item`` is the item object; an ``id`` is added when it has none."""

    item: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class HttpError:
    """Answer with HTTP ``status`` and a JSON error body instead of a stream.

    ``times`` is how many consecutive requests this step answers (Codex retries some
    statuses; the config helper sets retries to 0 so one is usually enough).
    """

    status: int
    message: str | None = None
    times: int = 1
    headers: tuple[tuple[str, str], ...] = ()
    body: Any = None
    """A JSON body to send instead of the default ``{"error": {"message": ...}}``."""


@dataclass(frozen=True, slots=True)
class ErrorEvent:
    """End the stream with a ``response.failed`` event (or a bare ``error`` event when
    ``event="error"``) carrying ``message`` and ``code``."""

    message: str
    code: str = "server_error"
    event: str = "response.failed"


@dataclass(frozen=True, slots=True)
class Stall:
    """Pause the stream for ``seconds`` (after the HTTP headers and ``response.created``)."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Disconnect:
    """Close the connection here, without ``response.completed``."""


Step = Reply | Reasoning | CallTool | RunCommand | OutputItem | HttpError | ErrorEvent | Stall | Disconnect
TurnScript = Step | Sequence[Step]
"""What answers one ``/v1/responses`` request."""


def as_steps(script: TurnScript) -> tuple[Step, ...]:
    """Normalise a single step or a sequence of steps to a tuple."""
    if isinstance(
        script, Reply | Reasoning | CallTool | RunCommand | OutputItem | HttpError | ErrorEvent | Stall | Disconnect
    ):
        return (script,)
    return tuple(script)
