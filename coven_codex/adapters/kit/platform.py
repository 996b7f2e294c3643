"""The :class:`Platform` protocol an adapter implements, and the messages it exchanges with the kit.

A platform is the chat service's side: it posts, edits and deletes messages, shows a typing
indicator, answers "did you already post the message with this key?" (:meth:`Platform.find`) and
yields what users do (:class:`IncomingMessage`, :class:`ButtonPress`).

**What a platform answered, in one classification** (each adapter maps its library's errors onto
it; :func:`classify_http` does it for an HTTP status):

- :class:`Unavailable`: a 5xx, a network failure, a timeout. Whether the call took effect is
  unknown; the runner looks a post up (:meth:`Platform.find`) and tries again with backoff, for
  ever: nothing is skipped;
- :class:`RateLimited`: wait ``retry_after`` seconds; only that conversation waits;
- :class:`PlatformError` with :attr:`Refusal.ENTRY`: this message is refused (400, too long,
  malformed): the runner tries the fallback (plain text, then smaller parts), then shows one
  notice in the conversation and moves on;
- :attr:`Refusal.CHANNEL`: the bot may not post there (403, archived, not in the channel): a
  notice where one can be posted, else a log line; the adapter lives on;
- :attr:`Refusal.FATAL`: the bot's token is refused or revoked: the adapter stops with the message.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Protocol, runtime_checkable

from coven_codex.adapters.kit.render import Dialect
from coven_codex.entries import Attachment


class Refusal(StrEnum):
    """What a platform's refusal covers: this message, the whole channel, or the adapter itself."""

    ENTRY = "entry"
    """This message (400, too long, malformed): fall back, then one notice, then move on."""
    CHANNEL = "channel"
    """Every message at this address (403, archived, not in the channel): a notice if possible, else a log line."""
    FATAL = "fatal"
    """The adapter cannot work at all (token revoked): it stops with the message."""


class PlatformError(Exception):
    """The platform refused an operation for good; the message says what and what to do.

    ``refusal`` says what the refusal covers (:class:`Refusal`); a plain ``PlatformError`` is a
    refusal of this message only.
    """

    def __init__(self, message: str, refusal: Refusal = Refusal.ENTRY) -> None:
        super().__init__(message)
        self.refusal = refusal


class RateLimited(Exception):
    """The platform asks to wait ``retry_after`` seconds before the next call (HTTP 429)."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"rate limited: retry after {retry_after:g} s")
        self.retry_after = max(0.0, retry_after)


class Unavailable(Exception):
    """The platform could not be reached or failed (5xx, network, timeout): try again; nothing is lost.

    Whether the call took effect is unknown: a post is looked up before it is made again.
    """


def classify_http(status: int, detail: str, retry_after: float | None = None) -> Exception:
    """The kit's exception for an HTTP ``status`` a platform answered (``detail`` says what it said).

    429 → :class:`RateLimited`; 5xx (and 408) → :class:`Unavailable`; 401 → fatal; 403 and 404 →
    the channel; any other 4xx → this entry.
    """
    if status == 429:
        return RateLimited(1.0 if retry_after is None else retry_after)
    if status >= 500 or status == 408 or status < 400:
        return Unavailable(f"HTTP {status}: {detail}")
    if status == 401:
        return PlatformError(f"the platform refused the bot's token (HTTP 401: {detail})", Refusal.FATAL)
    if status in (403, 404):
        return PlatformError(detail, Refusal.CHANNEL)
    return PlatformError(detail, Refusal.ENTRY)


@dataclass(frozen=True, slots=True)
class Address:
    """Where a message lives on a platform: ``workspace`` (server, team), ``channel``, ``thread``.

    A browser tab's chat is ``Address(channel=<chat id>)``; a console is ``Address(channel=<conversation>)``.
    """

    channel: str
    workspace: str = ""
    thread: str = ""


@dataclass(frozen=True, slots=True)
class User:
    """Who did something on the platform: a stable ``id``, a display ``name`` and their roles/groups."""

    id: str
    name: str = ""
    roles: frozenset[str] = frozenset()

    @property
    def label(self) -> str:
        """The name to show and to write as the entry's ``sender``."""
        return self.name or self.id


@dataclass(frozen=True, slots=True)
class Button:
    """A button under a message; pressing it runs ``action`` (a command line such as ``approve r1``).

    A ``disabled`` button is shown greyed out where the platform can (Discord), else left out (Slack):
    an approval request's buttons once it was answered.
    """

    label: str
    action: str
    disabled: bool = False


@dataclass(frozen=True, slots=True)
class FileUpload:
    """A file to upload with a message: where it is, the name shown, its media type and size."""

    path: Path
    name: str
    media_type: str
    size: int


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A message the kit asks the platform to show, already in the platform's dialect.

    ``final`` is False while a reply is still being streamed (the message will be edited again).
    ``style`` names what it shows (``response``, ``tool_call``, ``error``, ...) for platforms that
    colour or lay out kinds differently. ``markdown``: the text is Markdown (a reply, reasoning), for
    platforms with a facility of their own for it (Slack's ``markdown`` block); False for plain text
    and for the plain fallback of a refused message.
    """

    text: str
    style: str = "response"
    buttons: tuple[Button, ...] = ()
    final: bool = True
    markdown: bool = False
    file: FileUpload | None = None
    """A file to upload with ``text`` as its caption (files out, :mod:`~coven_codex.adapters.kit.files`);
    a platform that cannot upload posts ``text``, which names the file."""


@dataclass(frozen=True, slots=True)
class IncomingMessage:
    """A user wrote ``text`` (with optional attachments) at ``address``.

    ``message_id`` is the platform's id of that message, when it has one: a message the platform
    delivers again (after a reconnect or an adapter crash) then becomes one thought, not two.
    """

    address: Address
    user: User
    text: str
    attachments: tuple[Attachment, ...] = ()
    message_id: str = ""


@dataclass(frozen=True, slots=True)
class ButtonPress:
    """A user pressed a button whose action is ``action`` under message ``message_id``."""

    address: Address
    user: User
    action: str
    message_id: str = ""


Incoming = IncomingMessage | ButtonPress


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a platform can do, which the runner adapts to.

    ``edit_interval``: the least time between two edits of one message (its edit rate limit);
    ``can_find``: :meth:`Platform.find` answers from the platform, making posting exactly once
    (else at least once, see :mod:`~coven_codex.adapters.kit.ledger`);
    ``echoes_own_messages``: the platform already shows what its user typed (chat services do),
    so the runner does not render thoughts it appended itself;
    ``edits``: a message can be changed after it was posted (a terminal cannot: a progress card is
    then shown once, at the turn's end);
    ``typing_refresh``: seconds after which the typing indicator fades by itself (Discord's lasts
    about 10 s), so the runner shows it again while a turn runs; None: it lasts until turned off.
    """

    edit_interval: float = 1.0
    can_find: bool = True
    echoes_own_messages: bool = True
    edits: bool = True
    typing_refresh: float | None = None


@runtime_checkable
class Platform(Protocol):
    """A chat service as the kit sees it.

    Every call may raise :class:`RateLimited`, :class:`Unavailable` or :class:`PlatformError`
    (see the module docstring); any other exception is a bug of the adapter.
    """

    name: str
    """Short, stable, used in conversation names and cursor names (``web``, ``slack``)."""
    dialect: Dialect
    capabilities: Capabilities

    async def post(self, address: Address, message: Outgoing, key: str | None) -> str:
        """Show ``message`` at ``address``; return the platform's message id.

        ``key`` is a deterministic idempotency key (None for messages not tied to a journal
        entry, such as a refusal): pass it to the platform's own idempotency mechanism if it has
        one, and remember it so that :meth:`find` can answer.
        """
        ...

    async def edit(self, address: Address, message_id: str, message: Outgoing) -> None:
        """Replace the message ``message_id`` with ``message``."""
        ...

    async def delete(self, address: Address, message_id: str) -> None:
        """Remove the message ``message_id``."""
        ...

    async def typing(self, address: Address, active: bool) -> None:
        """Show (or stop showing) that Codex is working at ``address``."""
        ...

    async def find(self, address: Address, key: str) -> str | None:
        """The id of the message posted with ``key``, or None if there is none.

        Platforms whose ``capabilities.can_find`` is False are never asked.
        """
        ...

    def incoming(self) -> AsyncIterator[Incoming]:
        """What users do, as it happens; ends when the platform closes."""
        ...


@runtime_checkable
class FindsByContent(Protocol):
    """A platform whose :meth:`Platform.find` answers only for a while (Discord's nonce: minutes).

    After :meth:`Platform.find` found nothing, the runner asks this for an intent-only key: the ids
    of the bot's own messages at ``address`` created after ``since`` (Unix time, the intent's)
    whose text has ``digest`` (:func:`~coven_codex.adapters.kit.ledger.content_digest`), oldest
    first; the first one no other key owns is taken as the message.
    """

    async def find_by_content(self, address: Address, since: float, digest: str) -> list[str]:
        """See the class docstring."""
        ...


@runtime_checkable
class NamesPlaces(Protocol):
    """A platform that can name an address for people (``/list``'s "where it lives"), from what it knows
    without a call (a cache); the runner says ``channel C, thread T`` for the others."""

    def place(self, address: Address) -> str:
        """``address`` as its users know it (``#general, thread 12``), in plain text."""
        ...
