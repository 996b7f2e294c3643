"""Conversation mapping: a platform address ↔ a journal conversation name, stable across restarts.

The name is computed from the address alone (nothing to store, nothing to lose): for Slack
``slack:T01/C02/1700000000.1`` (workspace/channel/thread, each percent-escaped), for a browser
tab ``web:/chat-3f2a/``. A channel may have **one shared session** (everyone in it talks to the
same Codex session, the default) or **one session per user** (``…@U123`` is appended): see
:class:`ChannelMap`. The reverse (:meth:`ChannelMap.address`) tells the runner where to show an
entry, and which conversations are its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol
from urllib.parse import quote, unquote

from coven_codex.adapters.kit.platform import Address, User

SessionScope = Literal["shared", "per_user"]


class ConversationMap(Protocol):
    """How an adapter names its conversations."""

    def conversation(self, address: Address, user: User) -> str:
        """The conversation a message from ``user`` at ``address`` belongs to."""
        ...

    def address(self, conversation: str) -> Address | None:
        """Where entries of ``conversation`` are shown; None when it is not this adapter's."""
        ...


def _q(text: str) -> str:
    return quote(text, safe="")


@dataclass(frozen=True, slots=True)
class ChannelMap:
    """``<platform>:<workspace>/<channel>/<thread>[@<user>]`` for network chats.

    ``per_user`` lists the channels (by ``channel`` id) where every user gets a session of their
    own; ``default_scope`` applies to the others.
    """

    platform: str
    per_user: frozenset[str] = frozenset()
    default_scope: SessionScope = "shared"

    def scope(self, address: Address) -> SessionScope:
        """Whether ``address``'s channel shares one session or gives each user theirs."""
        return "per_user" if address.channel in self.per_user else self.default_scope

    def conversation(self, address: Address, user: User) -> str:
        """The conversation name (see the class docstring)."""
        name = f"{self.platform}:{_q(address.workspace)}/{_q(address.channel)}/{_q(address.thread)}"
        if self.scope(address) == "per_user":
            name += f"@{_q(user.id)}"
        return name

    def address(self, conversation: str) -> Address | None:
        """The address of a conversation this map named; None for anyone else's."""
        platform, colon, rest = conversation.partition(":")
        if not colon or platform != self.platform:
            return None
        rest = rest.split("@", 1)[0]
        fields = rest.split("/")
        if len(fields) != 3:
            return None
        workspace, channel, thread = (unquote(field) for field in fields)
        return Address(channel=channel, workspace=workspace, thread=thread) if channel else None


@dataclass(slots=True)
class NamedMap:
    """Conversations named directly (the console): the channel *is* the conversation name.

    Only the conversations in ``joined`` are this adapter's.
    """

    joined: set[str]

    def conversation(self, address: Address, user: User) -> str:
        """The channel's name."""
        return address.channel

    def address(self, conversation: str) -> Address | None:
        """``Address(channel=conversation)`` when joined, else None."""
        return Address(channel=conversation) if conversation in self.joined else None
