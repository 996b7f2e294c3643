"""The live channel's messages (JSON over one WebSocket per tab), as typed models.

A new channel logs in first: the server sends :class:`Challenge`, the tab answers with
:data:`LoginMessage` (:class:`LoginToken` or :class:`LoginDevice`), the server answers
:class:`Hello` (or :class:`Refused` and closes). Then the tab sends :data:`ClientMessage`; the
server sends :class:`Entries`, :class:`Conversations` and :class:`Notice`.
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


class Challenge(BaseModel):
    """First message on a new connection: the tab logs in by answering it."""

    type: Literal["challenge"] = "challenge"
    nonce: str


class LoginToken(_Strict):
    """Log in with the access token; with ``device``, ask for a device key for later logins."""

    type: Literal["login"]
    token: str = Field(max_length=1000)
    device: bool = False


class LoginDevice(_Strict):
    """Log in with a device key: ``proof`` is ``HMAC(device secret, label + nonce)`` (base64url)."""

    type: Literal["authenticate"]
    device: str = Field(max_length=100)
    proof: str = Field(max_length=100)


LoginMessage = Annotated[LoginToken | LoginDevice, Field(discriminator="type")]
LOGIN_MESSAGE: TypeAdapter[LoginToken | LoginDevice] = TypeAdapter(LoginMessage)


class Device(BaseModel):
    """A device key handed out on a token login: the page imports ``secret`` (base64url) as a
    non-extractable WebCrypto key and keeps it in IndexedDB with ``id``."""

    id: str
    secret: str


class Refused(BaseModel):
    """The login was refused (the server closes the channel); ``text`` says what to do."""

    type: Literal["refused"] = "refused"
    text: str


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
    decision: Literal["approve", "approve_for_session", "deny"]
    """``approve_for_session``: Codex does not ask again for the same in this session."""


ClientMessage = Annotated[Subscribe | SendThought | SendCancel | SendReset | SendApproval, Field(discriminator="type")]
CLIENT_MESSAGE: TypeAdapter[Subscribe | SendThought | SendCancel | SendReset | SendApproval] = TypeAdapter(
    ClientMessage
)


class Hello(BaseModel):
    """The login is accepted: ``session`` authorises uploads and images while this channel is open."""

    type: Literal["hello"] = "hello"
    sender: str
    conversations: list[str]
    session: str
    device: Device | None = None


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
