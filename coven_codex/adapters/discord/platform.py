"""The Discord adapter as the kit sees it: :class:`DiscordPlatform` and :func:`run_discord`.

REST calls go through :class:`~coven_codex.adapters.discord.rest.DiscordRest` (exactly-once posts
with ``nonce`` + ``enforce_nonce``), users' actions come from
:class:`~coven_codex.adapters.discord.gateway.DiscordGateway`, and the kit's
:class:`~coven_codex.adapters.kit.runner.AdapterRunner` does the rest (journal, rendering,
2,000-character splitting, streaming by edits, access control, the delivery ledger).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import discord

from coven_codex.adapters.discord.gateway import DiscordGateway
from coven_codex.adapters.discord.rest import MESSAGE_LIMIT, DiscordRest
from coven_codex.adapters.kit.config import DiscordSection
from coven_codex.adapters.kit.files import read_upload
from coven_codex.adapters.kit.ledger import DeliveryLedger, ledger_path
from coven_codex.adapters.kit.platform import Address, Capabilities, Incoming, Outgoing, PlatformError
from coven_codex.adapters.kit.render import Dialect, PlainDialect, clip
from coven_codex.adapters.kit.runner import AdapterRunner
from coven_codex.attachments import ImageStore, uploads_dir
from coven_codex.journal.opening import JournalName, local_base, open_journal
from coven_codex.settings import state_root
from coven_codex.support.secret import Secret

log = logging.getLogger(__name__)

NAME = "discord"
EDIT_INTERVAL = 1.0
"""Least seconds between two edits of one streamed message (Discord allows about 5 edits per 5 s)."""
TYPING_REFRESH = 8.0
"""Seconds after which the typing indicator is triggered again while a turn runs (it fades after about 10 s)."""


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_SEPARATOR = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")


def _cells(line: str) -> list[str]:
    """The cells of a Markdown table row (``| a | b |`` or ``a | b``)."""
    inner = line.strip()
    inner = inner.removeprefix("|")
    inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
    return [cell.strip().replace("\\|", "|") for cell in _CELL_SPLIT.split(inner)]


def _table(rows: list[list[str]]) -> list[str]:
    """A table's rows as aligned monospace lines (the header, a rule, the body)."""
    columns = max(len(row) for row in rows)
    rows = [row + [""] * (columns - len(row)) for row in rows]
    widths = [max(len(row[column]) for row in rows) for column in range(columns)]
    lines = [" | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "-+-".join("-" * width for width in widths))
    return lines


def tables_as_code(source: str) -> str:
    """Markdown tables (which Discord shows as raw pipes) as aligned code blocks; code blocks untouched."""
    lines = source.split("\n")
    out: list[str] = []
    fence: str | None = None
    index = 0
    while index < len(lines):
        line = lines[index]
        opened = _FENCE.match(line)
        if fence is not None:
            if opened is not None and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = None
        elif opened is not None:
            fence = opened.group(1)
        elif "|" in line and index + 1 < len(lines) and "|" in lines[index + 1] and _SEPARATOR.match(lines[index + 1]):
            end = index + 2
            while end < len(lines) and "|" in lines[end] and lines[end].strip():
                end += 1
            rows = [_cells(line)] + [_cells(row) for row in lines[index + 2 : end]]
            out += ["```", *_table(rows), "```"]
            index = end
            continue
        out.append(line)
        index += 1
    return "\n".join(out)


class DiscordDialect(PlainDialect):
    """Discord Markdown: Markdown as written (tables as code blocks), at most 2,000 characters a message."""

    name = "discord"

    def __init__(self) -> None:
        super().__init__(limit=MESSAGE_LIMIT)

    def prepare(self, source: str) -> str:
        """Tables as aligned code blocks (Discord renders no tables), before the text is split."""
        return tables_as_code(source)

    def folded(self, summary: str, body: str) -> str:
        """A summary line, then the body as a quote."""
        quoted = "\n".join(f"> {line}" for line in body.splitlines() or [""])
        return f"**{summary}**\n{quoted}"


class DiscordPlatform:
    """Discord, as the kit's :class:`~coven_codex.adapters.kit.platform.Platform`."""

    name = NAME

    def __init__(
        self,
        rest: DiscordRest,
        gateway: DiscordGateway,
        *,
        edit_interval: float = EDIT_INTERVAL,
        files: Path | None = None,
    ) -> None:
        """``files``: the journal's attachments folder, the only place files out are uploaded from
        (None: files are refused, each with one notice)."""
        self.files = files
        self.dialect: Dialect = DiscordDialect()
        self.capabilities = Capabilities(
            edit_interval=edit_interval, can_find=True, echoes_own_messages=True, typing_refresh=TYPING_REFRESH
        )
        self.rest = rest
        self.gateway = gateway

    def place(self, address: Address) -> str:
        """A channel mention (``<#id>``, the thread's when there is one: Discord shows it as a link); a DM is
        "a direct message" (``/list``'s "where it lives")."""
        if not address.workspace:
            return "a direct message"
        return f"<#{address.thread or address.channel}>"

    async def post(self, address: Address, message: Outgoing, key: str | None) -> str:
        """Post through REST (exactly once for a ``key``).

        A notice (no ``key``) said while a slash command at ``address`` is handled is that
        command's response instead; when Discord no longer takes it (the interaction's 15 minutes
        are over), it is posted in the channel.
        """
        answer = self.gateway.answering(address) if key is None else None
        if answer is not None:
            try:
                return await answer.say(message.text)
            except (discord.HTTPException, aiohttp.ClientError, TimeoutError) as exc:
                log.info("discord: a slash command's response went to the channel instead: %s", clip(str(exc), 200))
        if message.file is not None:  # files out: the file as the message's attachment
            if self.files is None:
                raise PlatformError("this adapter has no attachments folder to send files from")
            data = await asyncio.to_thread(read_upload, message.file, self.files)
            return await self.rest.post(address, message, key, file=(message.file.name, data))
        return await self.rest.post(address, message, key)

    async def edit(self, address: Address, message_id: str, message: Outgoing) -> None:
        """Edit through REST."""
        await self.rest.edit(address, message_id, message)

    async def delete(self, address: Address, message_id: str) -> None:
        """Delete through REST."""
        await self.rest.delete(address, message_id)

    async def typing(self, address: Address, active: bool) -> None:
        """Discord's typing indicator."""
        await self.rest.typing(address, active)

    async def find(self, address: Address, key: str) -> str | None:
        """A recent message posted with ``key``'s nonce."""
        return await self.rest.find(address, key)

    async def find_by_content(self, address: Address, since: float, digest: str) -> list[str]:
        """The bot's later messages with that text (past the nonce's window)."""
        return await self.rest.find_by_content(address, since, digest)

    def incoming(self) -> AsyncIterator[Incoming]:
        """The Gateway's events for the bot."""
        return self.gateway.events()


async def _connect(gateway: DiscordGateway) -> None:
    """Hold the Gateway connection (discord.py reconnects and resumes); refusals become clear errors."""
    try:
        await gateway.connect(reconnect=True)
    except discord.PrivilegedIntentsRequired as exc:
        raise PlatformError(
            "Discord refused the Message Content intent: enable it under Bot > Privileged Gateway "
            "Intents in the Developer Portal, then start again"
        ) from exc


async def _announce(gateway: DiscordGateway, runner: AdapterRunner, started: Callable[[str], None] | None) -> None:
    """Call ``started`` once the Gateway is ready and the runner follows the journal."""
    await runner.ready.wait()
    await gateway.wait_until_ready()
    if started is not None:
        started(str(gateway.user) if gateway.user is not None else "the bot")


@dataclass(frozen=True, slots=True)
class DiscordSettings:
    """What :func:`run_discord` needs: the journal, the bot token and the ``[adapters.discord]`` section."""

    journal: JournalName
    token: Secret
    section: DiscordSection


async def run_discord(settings: DiscordSettings, started: Callable[[str], None] | None = None) -> None:
    """Run the Discord adapter until the Gateway closes or the task is cancelled.

    ``started`` is called with the bot's user name once the Gateway is ready and the runner
    follows the journal. Raises :class:`~coven_codex.adapters.kit.platform.PlatformError` when
    Discord refuses the token.
    """
    section = settings.section
    access = section.access_policy()
    rest = DiscordRest(settings.token)
    await rest.start()
    images = ImageStore(uploads_dir(local_base(settings.journal, state_root())))
    gateway = DiscordGateway(
        listen_channels=frozenset(section.listen_channels),
        thread_channels=frozenset(section.thread_channels),
        images=images,
        access=access,
    )
    journal = open_journal(settings.journal)
    ledger = DeliveryLedger.open(ledger_path(local_base(settings.journal, state_root()), NAME))
    try:
        await gateway.login(settings.token.reveal())
        runner = AdapterRunner(
            journal,
            DiscordPlatform(rest, gateway, edit_interval=section.edit_interval, files=images.folder),
            section.channel_map(),
            access,
            ledger,
            name=NAME,
            options=section.runner_options(),
            metrics=section.metrics,
        )
        connection = asyncio.create_task(_connect(gateway))
        following = asyncio.create_task(runner.run())
        announce = asyncio.create_task(_announce(gateway, runner, started))
        try:
            await asyncio.wait({connection, following}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (connection, following, announce):
                task.cancel()
            await asyncio.gather(connection, following, announce, return_exceptions=True)
        for task in (connection, following):
            if not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
    finally:
        await gateway.close()
        await rest.close()
        ledger.close()
        await journal.aclose()
