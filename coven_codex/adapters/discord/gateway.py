"""Discord's Gateway side of the adapter: what users do, through discord.py's real event dispatch.

A :class:`discord.Client` connected to the Gateway turns ``MESSAGE_CREATE`` (a DM, a mention of
the bot, any message in a channel listed as listened to, or in a thread the bot started) into the
kit's :class:`~coven_codex.adapters.kit.platform.IncomingMessage` and a button's
``INTERACTION_CREATE`` into a :class:`~coven_codex.adapters.kit.platform.ButtonPress` (the
interaction is acknowledged at once, so Discord does not show "interaction failed").

Slash commands (:data:`SLASH_COMMANDS`: ``/codex``, ``/cancel``, ``/new``, ``/status``, ``/list``,
``/history``, ``/project``, ``/model``, ``/mode``) are application commands on discord.py's
:class:`~discord.app_commands.CommandTree`, registered
(``PUT /applications/{id}/commands``) at every start. A slash command is deferred at once
("Codex is thinking…") and becomes an :class:`IncomingMessage` (``/codex``'s prompt, or the text
``/cancel`` …) that the kit's runner handles like a typed one, access control included; what the
runner says back while handling it (a refusal, ``/status``, …) becomes the command's response
(:class:`SlashAnswer`), and a command that got no words (a prompt sent to Codex) shows the prompt.

In a channel listed in ``thread_channels`` a mention starts a Discord thread on the message
(``POST /channels/{id}/messages/{id}/threads``): the thread is the conversation, and every later
message in it goes to Codex without a mention.

Intents: ``guilds``, ``guild_messages``, ``dm_messages`` and the privileged ``message_content``
(enable "Message Content Intent" under Bot in the Developer Portal).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

import aiohttp
import discord
import discord.http
from discord import app_commands

from coven_codex.adapters.discord.rest import MESSAGE_LIMIT
from coven_codex.adapters.kit.access import AccessPolicy
from coven_codex.adapters.kit.downloads import Downloader, DownloadRefused
from coven_codex.adapters.kit.history import MAX_HISTORY
from coven_codex.adapters.kit.platform import Address, ButtonPress, Incoming, IncomingMessage, User
from coven_codex.adapters.kit.render import clip
from coven_codex.attachments import MAX_IMAGE_BYTES, ImageStore, UploadError
from coven_codex.entries import Attachment

log = logging.getLogger(__name__)

QUEUE_SIZE = 1000
"""Events waiting for the runner; the gateway reader waits (back-pressure) when it is full."""
THREAD_NAME_LIMIT = 100
"""Discord's longest thread name."""
THREAD_EXISTS = 160004
"""Discord's error code for "a thread has already been created for this message"."""
THREAD_ARCHIVE_MINUTES: Literal[1440] = 1440
"""A request's thread is archived after a day without messages (it reopens when someone writes)."""
CDN_HOSTS = frozenset({"cdn.discordapp.com", "media.discordapp.net"})
"""Discord's own hosts for attachments (besides the REST API's host): nothing is fetched elsewhere."""
NETWORK_ERRORS = (discord.HTTPException, aiohttp.ClientError, TimeoutError)
"""What a Discord call the gateway makes itself may raise: answered by a log line, never by a crash."""


def intents() -> discord.Intents:
    """The Gateway intents the adapter needs."""
    wanted = discord.Intents.none()
    wanted.guilds = True
    wanted.guild_messages = True
    wanted.dm_messages = True
    wanted.message_content = True
    return wanted


def _user(author: discord.User | discord.Member) -> User:
    """The kit's user for a Discord author: id, roles, and the name ``"<display name> (<id>)"``.

    Anyone can set their display name, and the kit's allow-lists also match names: with the id in
    it, a name can never equal a listed id.
    """
    roles = frozenset(str(role.id) for role in getattr(author, "roles", ()) if not role.is_default())
    return User(id=str(author.id), name=f"{author.display_name[:80]} ({author.id})", roles=roles)


def _address(channel: object, guild: discord.Guild | None) -> Address:
    workspace = "" if guild is None else str(guild.id)
    if isinstance(channel, discord.Thread):
        return Address(channel=str(channel.parent_id), workspace=workspace, thread=str(channel.id))
    return Address(channel=str(getattr(channel, "id", "")), workspace=workspace)


_NO_MENTIONS = discord.AllowedMentions.none()


@dataclass(slots=True)
class SlashAnswer:
    """A slash command being handled: what the runner says goes to its (deferred) response."""

    interaction: discord.Interaction
    address: Address
    fallback: str
    """Shown when the runner said nothing (the prompt sent to Codex)."""
    said: bool = False

    async def say(self, text: str) -> str:
        """Show ``text`` as the command's response (a follow-up message after the first); its message id."""
        if not self.said:
            message: discord.Message = await self.interaction.edit_original_response(
                content=text, allowed_mentions=_NO_MENTIONS
            )
        else:
            message = await self.interaction.followup.send(text, allowed_mentions=_NO_MENTIONS, wait=True)
        self.said = True
        return str(message.id)


def _gateway_of(interaction: discord.Interaction) -> DiscordGateway:
    client = interaction.client
    assert isinstance(client, DiscordGateway)
    return client


@app_commands.command(name="codex", description="Send a message to Codex in this conversation")
@app_commands.describe(prompt="what to ask Codex", image="an image for Codex to look at")
async def _codex_command(
    interaction: discord.Interaction, prompt: str, image: discord.Attachment | None = None
) -> None:
    files = (image,) if image is not None else ()
    await _gateway_of(interaction).slash(interaction, prompt, shown=f"> {prompt}", request=True, files=files)


@app_commands.command(name="cancel", description="Stop Codex's running turn in this conversation")
async def _cancel_command(interaction: discord.Interaction) -> None:
    await _gateway_of(interaction).slash(interaction, "/cancel")


@app_commands.command(name="new", description="Start a fresh Codex session in this conversation (admins)")
async def _new_command(interaction: discord.Interaction) -> None:
    await _gateway_of(interaction).slash(interaction, "/new")


@app_commands.command(name="status", description="Is Codex running here; queued messages, thread, token usage")
async def _status_command(interaction: discord.Interaction) -> None:
    await _gateway_of(interaction).slash(interaction, "/status")


@app_commands.command(name="list", description="The conversations you wrote in, the latest first")
async def _list_command(interaction: discord.Interaction) -> None:
    await _gateway_of(interaction).slash(interaction, "/list")


@app_commands.command(name="history", description="The last exchanges of this conversation (default 5)")
@app_commands.describe(count=f"how many exchanges, 1 to {MAX_HISTORY}")
async def _history_command(
    interaction: discord.Interaction, count: app_commands.Range[int, 1, MAX_HISTORY] | None = None
) -> None:
    await _gateway_of(interaction).slash(interaction, "/history" if count is None else f"/history {count}")


@app_commands.command(name="project", description="Work in one of the operator's projects; without a name: list them")
@app_commands.describe(name="the project's name")
async def _project_command(interaction: discord.Interaction, name: str | None = None) -> None:
    await _gateway_of(interaction).slash(interaction, f"/project {name or ''}".strip())


@app_commands.command(name="model", description="Use one of the operator's models; without a name: list them")
@app_commands.describe(name="the model's name")
async def _model_command(interaction: discord.Interaction, name: str | None = None) -> None:
    await _gateway_of(interaction).slash(interaction, f"/model {name or ''}".strip())


@app_commands.command(name="mode", description="read-only, ask or auto, as the operator allows; without one: list them")
@app_commands.describe(name="the mode: read-only, ask or auto")
async def _mode_command(interaction: discord.Interaction, name: str | None = None) -> None:
    await _gateway_of(interaction).slash(interaction, f"/mode {name or ''}".strip())


SLASH_COMMANDS: tuple[app_commands.Command[Any, Any, None], ...] = (
    _codex_command,
    _cancel_command,
    _new_command,
    _status_command,
    _list_command,
    _history_command,
    _project_command,
    _model_command,
    _mode_command,
)
"""The application commands the bot registers."""


class DiscordGateway(discord.Client):
    """A discord.py client whose events become the kit's :data:`Incoming` events."""

    def __init__(
        self,
        *,
        listen_channels: frozenset[str] = frozenset(),
        thread_channels: frozenset[str] = frozenset(),
        images: ImageStore | None = None,
        access: AccessPolicy | None = None,
    ) -> None:
        super().__init__(intents=intents(), max_messages=None, chunk_guilds_at_startup=False)
        self.listen_channels = listen_channels
        self.thread_channels = thread_channels
        self.access = access
        """Who may start a thread (the runner's policy; a stranger's refusal goes to the channel)."""
        self.images = images
        api_host = urlsplit(discord.http.Route.BASE).hostname or ""
        self.downloads = Downloader(CDN_HOSTS | {api_host}, MAX_IMAGE_BYTES)
        self.tree: app_commands.CommandTree[DiscordGateway] = app_commands.CommandTree(self)
        for command in SLASH_COMMANDS:
            self.tree.add_command(command)
        self._events: asyncio.Queue[tuple[Incoming, SlashAnswer | None]] = asyncio.Queue(QUEUE_SIZE)
        self._closed = asyncio.Event()
        self._answering: SlashAnswer | None = None
        self._thread_refused: set[str] = set()

    async def setup_hook(self) -> None:
        """After login: register the slash commands (a refusal is logged once; mentions still work)."""
        try:
            await self.tree.sync()
        except discord.HTTPException as exc:
            log.warning(
                "discord: the slash commands could not be registered (%s); mentions and DMs still work."
                " Invite the bot with the applications.commands scope (see docs/adapters.md)",
                clip(str(exc), 200),
            )

    def answering(self, address: Address) -> SlashAnswer | None:
        """The slash command being handled at ``address``, whose response the runner's words become."""
        answer = self._answering
        return answer if answer is not None and answer.address == address else None

    async def slash(
        self,
        interaction: discord.Interaction,
        text: str,
        shown: str = "done",
        request: bool = False,
        files: tuple[discord.Attachment, ...] = (),
    ) -> None:
        """Defer a slash command's response and queue it as a message with ``text``.

        A ``request`` (``/codex``) in a ``thread_channels`` channel starts its thread on the
        command's response message, as a mention does on the message.
        """
        try:
            deferred = await interaction.response.defer(thinking=True)
        except NETWORK_ERRORS as exc:  # too late (3 s) or gone: still handled, answers go to the channel
            log.warning("discord: a slash command could not be acknowledged: %s", clip(str(exc), 200))
            deferred = None
        address, user = _address(interaction.channel, interaction.guild), _user(interaction.user)
        if request and deferred is not None and deferred.message_id is not None:
            address = await self._thread_for(address, user, str(deferred.message_id), text)
        allowed = self.access is None or self.access.refusal(user, address) is None
        images = await self._images(files, address) if allowed and files else ()
        event = IncomingMessage(address, user, text, images, message_id=str(interaction.id))
        await self._events.put((event, SlashAnswer(interaction, address, shown[: MESSAGE_LIMIT - 1])))

    def _own_thread(self, channel: object) -> bool:
        return isinstance(channel, discord.Thread) and self.user is not None and channel.owner_id == self.user.id

    def _addressed(self, message: discord.Message) -> bool:
        """Is ``message`` for the bot: a DM, a mention, a listened-to channel or a thread the bot started."""
        if message.guild is None:
            return True
        if self.user is not None and self.user in message.mentions:
            return True
        address = _address(message.channel, message.guild)
        if address.thread and address.channel in self.thread_channels and self._own_thread(message.channel):
            return True
        return address.channel in self.listen_channels or address.thread in self.listen_channels

    async def _thread_for(self, address: Address, user: User, message_id: str, text: str) -> Address:
        """A new thread on message ``message_id`` as the request's conversation, when the channel wants one.

        Only for a user the access policy lets in here (a stranger's refusal goes to the channel,
        and no thread is started for it); the channel itself when Discord refuses.
        """
        if address.thread or address.channel not in self.thread_channels or not address.workspace:
            return address
        if self.access is not None and self.access.refusal(user, address) is not None:
            return address
        name = " ".join(text.split())[:THREAD_NAME_LIMIT] or "Codex"
        try:
            thread = await self.http.start_thread_with_message(
                address.channel, message_id, name=name, auto_archive_duration=THREAD_ARCHIVE_MINUTES
            )
        except NETWORK_ERRORS as exc:
            # Delivered again: Discord gives a message's thread the message's id.
            if isinstance(exc, discord.HTTPException) and exc.code == THREAD_EXISTS:
                return Address(channel=address.channel, workspace=address.workspace, thread=message_id)
            if address.channel not in self._thread_refused:
                self._thread_refused.add(address.channel)
                log.warning(
                    "discord: cannot start a thread in channel %s (%s); answering in the channel. Give the bot"
                    " Create Public Threads and Send Messages in Threads there (see docs/adapters.md)",
                    clip(address.channel, 32),
                    clip(str(exc), 200),
                )
            return address
        return Address(channel=address.channel, workspace=address.workspace, thread=str(thread["id"]))

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
        text, user = self._text(message), _user(message.author)
        address = await self._thread_for(_address(message.channel, message.guild), user, str(message.id), text)
        allowed = self.access is None or self.access.refusal(user, address) is None
        images = await self._images(message.attachments, address) if allowed else ()  # a stranger's: not fetched
        event = IncomingMessage(address, user, text, images, message_id=str(message.id))
        await self._events.put((event, None))

    async def _images(self, files: Sequence[discord.Attachment], address: Address) -> tuple[Attachment, ...]:
        """The image ``files`` (a message's or a slash command's), downloaded into the attachments folder.

        Only from Discord's own hosts, read whole up to the web page's limit and refused past it
        (the declared size is not trusted). Files that are not PNG, JPEG, GIF or WebP, too large
        or elsewhere are left out, and the user is told which (one notice per message, in the
        conversation).
        """
        if self.images is None:
            return ()
        stored: list[Attachment] = []
        left_out: list[str] = []
        for attachment in files:
            if attachment.size > MAX_IMAGE_BYTES:
                left_out.append(f"{clip(attachment.filename, 64)} (larger than {MAX_IMAGE_BYTES // 2**20} MiB)")
                continue
            try:
                data = await self.downloads.fetch(attachment.url)
                stored.append((await self.images.save(data)).attachment())
            except UploadError as exc:
                left_out.append(f"{clip(attachment.filename, 64)} ({clip(str(exc), 120)})")
            except DownloadRefused as exc:
                left_out.append(f"{clip(attachment.filename, 64)} (not downloaded: {clip(str(exc), 120)})")
        if left_out:
            await self._notice(
                address, "left out, only PNG, JPEG, GIF and WebP images go to Codex: " + "; ".join(left_out)
            )
        return tuple(stored)

    async def _notice(self, address: Address, text: str) -> None:
        """Post a short notice in the conversation at ``address`` (failures are logged, once each)."""
        params = discord.http.handle_message_parameters(
            content=text[: MESSAGE_LIMIT - 1], allowed_mentions=_NO_MENTIONS
        )
        try:
            with params:
                await self.http.send_message(address.thread or address.channel, params=params)
        except NETWORK_ERRORS as exc:
            log.warning("discord: a notice could not be posted: %s", clip(str(exc), 200))

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        """A button press: acknowledge it and queue its action (the button's ``custom_id``)."""
        if interaction.type is not discord.InteractionType.component or interaction.data is None:
            return
        action = str(interaction.data.get("custom_id", ""))
        try:
            await interaction.response.defer()
        except NETWORK_ERRORS as exc:  # the press is still handled; Discord shows "interaction failed"
            log.warning("discord: a button press could not be acknowledged: %s", clip(str(exc), 200))
        message_id = "" if interaction.message is None else str(interaction.message.id)
        press = ButtonPress(
            _address(interaction.channel, interaction.guild), _user(interaction.user), action, message_id
        )
        await self._events.put((press, None))

    async def events(self) -> AsyncIterator[Incoming]:
        """The queued events, as they come; ends when the client closes.

        A slash command's event is being handled until the next is asked for: meanwhile the
        runner's words at its address are its response (:meth:`answering`); when there were none,
        the response shows the command's fallback.
        """
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
                event, answer = get.result()
                self._answering = answer
                try:
                    yield event
                finally:
                    self._answering = None
                if answer is not None and not answer.said:
                    await self._settle(answer)

    async def _settle(self, answer: SlashAnswer) -> None:
        """Replace the "thinking" of a slash command the runner said nothing about."""
        try:
            await answer.say(answer.fallback)
        except NETWORK_ERRORS as exc:
            log.warning("discord: a slash command's response could not be shown: %s", clip(str(exc), 200))

    async def close(self) -> None:
        """Close the connection; :meth:`events` then ends."""
        try:
            await super().close()
            await self.downloads.aclose()
        finally:
            self._closed.set()
