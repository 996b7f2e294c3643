"""The app-server's messages coven reads, as typed models (Codex 0.169.0).

Written from ``codex app-server generate-json-schema`` (``ThreadStartResponse``,
``ThreadResumeResponse``, ``TurnStartResponse``, ``TurnStartedNotification``,
``TurnCompletedNotification``, ``ItemCompletedNotification``,
``AgentMessageDeltaNotification``, ``ErrorNotification``, ``ThreadLoadedListResponse``,
``ThreadUnsubscribeResponse``), only the
fields coven uses; every other field is ignored, so later versions that add fields still parse.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class ThreadRef(_Model):
    """A thread, by its id."""

    id: str = Field(min_length=1)


class LoadedThreads(_Model):
    """The result of ``thread/loaded/list``: the threads the process has loaded in memory."""

    data: list[str]
    next_cursor: str | None = Field(default=None, alias="nextCursor")
    """Set when more follow (a page size was asked for; coven asks for none)."""


class ThreadUnsubscribed(_Model):
    """The result of ``thread/unsubscribe``."""

    status: str | None = None
    """``unsubscribed`` (Codex 0.160 and later then unload the thread, and say ``thread/closed``
    when it is done), ``notSubscribed`` or ``notLoaded``; ``None`` from releases that do not say."""


class ThreadOpened(_Model):
    """The result of ``thread/start`` and ``thread/resume``."""

    thread: ThreadRef


class TurnError(_Model):
    """Why a turn failed, or what Codex reports in an ``error`` notification."""

    message: str = ""


class TurnRef(_Model):
    """A turn as the turn notifications and ``turn/start``'s result carry it."""

    id: str | None = None
    status: str | None = None
    error: TurnError | None = None


class TurnStartResult(_Model):
    """The result of ``turn/start``."""

    turn: TurnRef | None = None


class TurnNotification(_Model):
    """``turn/started`` and ``turn/completed``."""

    turn: TurnRef


class AgentMessageDelta(_Model):
    """``item/agentMessage/delta``: a piece of a reply being written."""

    item_id: str = Field(default="", alias="itemId")
    delta: str


class Item(_Model):
    """An item of a turn (only agent messages are read)."""

    type: str
    id: str = ""
    text: str = ""


class ItemCompleted(_Model):
    """``item/completed``."""

    item: Item


class ErrorNotification(_Model):
    """``error``: Codex met an error and says whether it retries."""

    error: TurnError | None = None
    will_retry: bool = Field(default=False, alias="willRetry")
