"""The live channel's messages (JSON over one WebSocket per tab), as typed models.

The tab sends :data:`ClientMessage`; the server sends :class:`Hello`, :class:`Entries`,
:class:`Conversations` and :class:`Notice`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from coven_codex.adapters.web.render import WireEntry

MAX_TEXT = 100_000
MAX_NAME = 120
MAX_ATTACHMENTS = 8

ConversationName = Annotated[str, Field(min_length=1, max_length=MAX_NAME, pattern=r"^[^\x00-\x1f\x7f]+$")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Subscribe(_Strict):
    """Show ``conversation``: send its entries after ``after`` (its last few when None), then live."""

    type: Literal["subscribe"]
    conversation: ConversationName
    after: int | None = Field(default=None, ge=0)


class SendThought(_Strict):
    """Append a thought, with the stored images named in ``attachments``."""

    type: Literal["thought"]
    conversation: ConversationName
    text: str = Field(max_length=MAX_TEXT)
    attachments: list[str] = Field(default_factory=list, max_length=MAX_ATTACHMENTS)


class SendCancel(_Strict):
    """Append a ``cancel``: stop the running turn."""

    type: Literal["cancel"]
    conversation: ConversationName


class SendReset(_Strict):
    """Append a ``reset``: start the conversation afresh."""

    type: Literal["reset"]
    conversation: ConversationName


class SendApproval(_Strict):
    """Append an ``approval`` answering ``request_id``."""

    type: Literal["approval"]
    conversation: ConversationName
    request_id: str = Field(min_length=1, max_length=200)
    decision: Literal["approve", "deny"]


ClientMessage = Annotated[Subscribe | SendThought | SendCancel | SendReset | SendApproval, Field(discriminator="type")]
CLIENT_MESSAGE: TypeAdapter[Subscribe | SendThought | SendCancel | SendReset | SendApproval] = TypeAdapter(
    ClientMessage
)


class Hello(BaseModel):
    """First message on a new connection."""

    type: Literal["hello"] = "hello"
    sender: str
    conversations: list[str]


class Entries(BaseModel):
    """Entries of ``conversation`` in journal order (``history`` for the first batch of a subscription)."""

    type: Literal["entries"] = "entries"
    conversation: str
    history: bool
    entries: list[WireEntry]


class Conversations(BaseModel):
    """The conversations in the journal, most recently active first."""

    type: Literal["conversations"] = "conversations"
    conversations: list[str]


class Notice(BaseModel):
    """Something the user should read (a refused message, a failed append)."""

    type: Literal["notice"] = "notice"
    text: str
