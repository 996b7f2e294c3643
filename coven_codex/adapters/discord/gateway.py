"""Discord's Gateway side of the adapter: what users do, through discord.py's real event dispatch.

A :class:`discord.Client` connected to the Gateway turns ``MESSAGE_CREATE`` (a DM, a mention of
the bot, or any message in a channel listed as listened to) into the kit's
:class:`~coven_codex.adapters.kit.platform.IncomingMessage` and a button's ``INTERACTION_CREATE``
into a :class:`~coven_codex.adapters.kit.platform.ButtonPress` (the interaction is acknowledged at
once, so Discord does not show "interaction failed").

Intents: ``guilds``, ``guild_messages``, ``dm_messages`` and the privileged ``message_content``
(enable "Message Content Intent" under Bot in the Developer Portal).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import discord

from coven_codex.adapters.kit.platform import Address, ButtonPress, Incoming, IncomingMessage, User
from coven_codex.adapters.kit.render import clip
from coven_codex.adapters.web.uploads import MAX_IMAGE_BYTES, ImageStore, UploadError
from coven_codex.entries import Attachment

log = logging.getLogger(__name__)

QUEUE_SIZE = 1000
"""Events waiting for the runner; the gateway reader waits (back-pressure) when it is full."""


def intents() -> discord.Intents:
    """The Gateway intents the adapter needs."""
    wanted = discord.Intents.none()
    wanted.guilds = True
    wanted.guild_messages = True
    wanted.dm_messages = True
    wanted.message_content = True
    return wanted


def _user(author: discord.User | discord.Member) -> User:
    roles = frozenset(str(role.id) for role in getattr(author, "roles", ()) if not role.is_default())
    return User(id=str(author.id), name=author.display_name[:80], roles=roles)


def _address(channel: object, guild: discord.Guild | None) -> Address:
    workspace = "" if guild is None else str(guild.id)
    if isinstance(channel, discord.Thread):
        return Address(channel=str(channel.parent_id), workspace=workspace, thread=str(channel.id))
    return Address(channel=str(getattr(channel, "id", "")), workspace=workspace)


class DiscordGateway(discord.Client):
    """A discord.py client whose events become the kit's :data:`Incoming` events."""

    def __init__(self, *, listen_channels: frozenset[str] = frozenset(), images: ImageStore | None = None) -> None:
        super().__init__(intents=intents(), max_messages=None, chunk_guilds_at_startup=False)
        self.listen_channels = listen_channels
        self.images = images
        self._events: asyncio.Queue[Incoming] = asyncio.Queue(QUEUE_SIZE)
        self._closed = asyncio.Event()

    def _addressed(self, message: discord.Message) -> bool:
        """Is ``message`` for the bot: a DM, a mention, or a listened-to channel."""
        if message.guild is None:
            return True
        if self.user is not None and self.user in message.mentions:
            return True
        address = _address(message.channel, message.guild)
        return address.channel in self.listen_channels or address.thread in self.listen_channels

    def _text(self, message: discord.Message) -> str:
        text = message.content
        if self.user is not None:
            for mention in (f"<@{self.user.id}>", f"<@!{self.user.id}>"):
                text = text.replace(mention, "")
        return text.strip()

    async def on_message(self, message: discord.Message) -> None:
        """A message the bot can see: queue it when it is for the bot and not the bot's own."""
        if message.author.bot or not self._addressed(message):
            return
        await self._events.put(
            IncomingMessage(
                _address(message.channel, message.guild),
                _user(message.author),
                self._text(message),
                await self._images(message),
                message_id=str(message.id),
            )
        )

    async def _images(self, message: discord.Message) -> tuple[Attachment, ...]:
        """The message's image attachments, downloaded into the journal's attachments folder.

        Files that are not PNG, JPEG, GIF or WebP, or larger than the web page's limit, are left
        out (with one warning each, the file name cut).
        """
        if self.images is None:
            return ()
        stored: list[Attachment] = []
        for attachment in message.attachments:
            if attachment.size > MAX_IMAGE_BYTES:
                log.warning(
                    "discord: attachment %s is larger than the image limit; left out", clip(attachment.filename, 64)
                )
                continue
            try:
                data = await attachment.read()
                stored.append((await self.images.save(data)).attachment())
            except (UploadError, discord.HTTPException) as exc:
                log.warning("discord: attachment %s left out: %s", clip(attachment.filename, 64), clip(str(exc), 200))
        return tuple(stored)

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        """A button press: acknowledge it and queue its action (the button's ``custom_id``)."""
        if interaction.type is not discord.InteractionType.component or interaction.data is None:
            return
        action = str(interaction.data.get("custom_id", ""))
        await interaction.response.defer()
        message_id = "" if interaction.message is None else str(interaction.message.id)
        await self._events.put(
            ButtonPress(_address(interaction.channel, interaction.guild), _user(interaction.user), action, message_id)
        )

    async def events(self) -> AsyncIterator[Incoming]:
        """The queued events, as they come; ends when the client closes."""
        while not self.is_closed():
            get = asyncio.ensure_future(self._events.get())
            closed = asyncio.ensure_future(self._closed.wait())
            try:
                await asyncio.wait({get, closed}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                closed.cancel()
                if not get.done():
                    get.cancel()
            if get.done() and not get.cancelled():
                yield get.result()

    async def close(self) -> None:
        """Close the connection; :meth:`events` then ends."""
        try:
            await super().close()
        finally:
            self._closed.set()
