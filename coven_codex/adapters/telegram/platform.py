"""The Telegram adapter as the kit sees it: :class:`TelegramPlatform` and :func:`run_telegram`.

Built on python-telegram-bot's :class:`telegram.Bot` (its typed Bot API methods over httpx), not
on its ``Application`` framework: the kit's runner already is the application (journal, lanes,
ledger, commands), and the Bot alone leaves every wait and every retry to the kit.

- **Updates** come by long polling (``getUpdates`` with an ``offset``; no public URL needed). The
  offset moves past an update only after the runner has handled it, so an update a crash cut
  short comes again; a message's ``chat:message_id`` makes it one thought (the kit's ledger).
- **Conversations**: a private chat, a group and a forum topic (``message_thread_id``) are each
  one (:class:`~coven_codex.adapters.kit.platform.Address` ``channel`` = chat id, ``thread`` =
  topic). In groups the bot answers mentions (``@bot``), replies to its messages, its commands
  (``/status`` or ``/status@bot``), and every message in ``listen_chats``. It ignores every bot,
  itself included.
- **Replies** in Telegram's HTML (:mod:`~coven_codex.adapters.telegram.dialect`); a message
  Telegram refuses for its markup ("can't parse entities") is sent again at once as plain text
  with no parse mode. Streams are edited (``editMessageText``); "message is not modified" is a
  success. Buttons are an inline keyboard whose ``callback_data`` is the kit's action; a press is
  answered (``answerCallbackQuery``) at once.
- **Typing**: ``sendChatAction`` lasts five seconds; it is repeated every :data:`TYPING_EVERY`
  seconds while a turn runs (at most :data:`TYPING_MAX`).
- **Budgets** (:class:`~coven_codex.adapters.kit.budget.Budgets`): Telegram's documented limits,
  about 30 messages a second in all, one a second in a chat, 20 a minute in a group, each a
  setting; sends and edits take a token of each.
- **Images in**: a photo or an image document from a sender the access policy lets in, fetched
  through ``getFile`` from the Bot API's own file host only, read whole up to the limit.

**Exactly once.** Telegram has no idempotency key and a bot cannot read a chat's history, so
:meth:`TelegramPlatform.find` cannot answer (``can_find`` False): a kill between Telegram creating
a message and the ledger's durable record of its id repeats that one message once. The window is
the time from the answer to ``sendMessage`` to the ledger's fsync (docs/adapters.md has the
measured figure). Nothing is ever lost.

What Telegram answers is mapped onto the kit's classification by :func:`classify`.
"""

from __future__ import annotations

import asyncio
import datetime as dtm
import hashlib
import logging
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urlsplit

import telegram
from telegram import (
    BotCommand,
    CallbackQuery,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    InputFile,
    LinkPreviewOptions,
    Message,
    MessageEntity,
    Update,
)
from telegram.constants import ChatAction, ParseMode
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Conflict,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
    TimedOut,
)
from telegram.request import HTTPXRequest
from telegram.warnings import PTBDeprecationWarning

from coven_codex.adapters.kit.access import AccessPolicy
from coven_codex.adapters.kit.budget import Budgets, Rate, Scope
from coven_codex.adapters.kit.config import TelegramSection
from coven_codex.adapters.kit.downloads import Downloader, DownloadRefused
from coven_codex.adapters.kit.files import read_upload
from coven_codex.adapters.kit.ledger import DeliveryLedger, ledger_path
from coven_codex.adapters.kit.platform import (
    Address,
    ButtonPress,
    Capabilities,
    FileUpload,
    Incoming,
    IncomingMessage,
    Outgoing,
    PlatformError,
    RateLimited,
    Refusal,
    Unavailable,
    User,
)
from coven_codex.adapters.kit.render import Dialect, clip
from coven_codex.adapters.kit.runner import BACKOFF, AdapterRunner
from coven_codex.adapters.telegram.dialect import TelegramDialect, escape, to_plain
from coven_codex.adapters.telegram.webhook import WebhookReceiver
from coven_codex.attachments.store import MAX_IMAGE_BYTES, ImageStore, UploadError, uploads_dir
from coven_codex.entries import Attachment
from coven_codex.journal.opening import JournalName, local_base, open_journal
from coven_codex.settings import state_root
from coven_codex.support.secret import Secret

log = logging.getLogger(__name__)

NAME = "telegram"
API_URL = "https://api.telegram.org"
TYPING_EVERY = 4.0
"""Seconds between two ``sendChatAction`` while a turn runs (Telegram shows one for five)."""
TYPING_MAX = 600.0
"""The longest a typing indicator is kept up without a turn's end (a turn cut short by a restart)."""
REACH_TIMEOUT = 10.0
"""Seconds ``validate`` waits for ``getMe``."""
CALLBACK_LIMIT = 64
CAPTION_LIMIT = 1024
"""Characters of a document's caption (Bot API, sendDocument)."""
"""Telegram's most bytes of a button's ``callback_data``."""
UPDATES = ("message", "callback_query")
"""The update types the bot asks for."""
COMMANDS = (
    ("cancel", "Stop Codex's running turn"),
    ("new", "Start a fresh Codex session here (admins)"),
    ("status", "Running or idle, queued messages, thread, token usage"),
    ("approve", "Approve the oldest (or the given) pending request"),
    ("approve_session", "Approve it for the rest of the session"),
    ("deny", "Deny it"),
    ("details", "The last turn's tool output"),
    ("resume", "List your earlier threads, or continue one here"),
    ("list", "Your conversations, the most recently active first"),
    ("history", "The last exchanges here (/history N)"),
    ("project", "Work in one of the operator's projects; alone: list them"),
    ("model", "Use one of the operator's models; alone: list them"),
    ("mode", "read-only, ask or auto, as allowed; alone: list them"),
    ("help", "The commands"),
)
"""The kit's commands as registered with ``setMyCommands`` (shown in Telegram's command menu; a name
allows no ``-``: ``approve_session`` is the kit's ``approve-session``)."""
QUIET_LOGGERS = {"httpx": logging.WARNING, "httpcore": logging.WARNING, "telegram": logging.CRITICAL}
"""Libraries' loggers held back: httpx logs every request's URL, which holds the bot token, at INFO;
python-telegram-bot logs failures the adapter classifies and reports itself (without the token)."""
NO_PREVIEW = LinkPreviewOptions(is_disabled=True)
PARSE_REFUSED = "can't parse entities"
NOT_MODIFIED = "message is not modified"
CHANNEL_REFUSALS = (
    "chat not found",
    "message thread not found",
    "topic_closed",
    "topic_deleted",
    "not enough rights",
    "have no rights",
    "chat_write_forbidden",
    "group chat was upgraded",
)
"""Parts of a 400's description that refuse every message at that address, not only this one."""
CHANNEL_HINT = "; add the bot to the chat (and let it post there), or remove the chat from allow_channels"

T = TypeVar("T")


def _seconds(exc: RetryAfter) -> float:
    """The wait Telegram asked for (read without python-telegram-bot's deprecation warning about its type)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        retry_after: int | dtm.timedelta = exc.retry_after
    return retry_after.total_seconds() if isinstance(retry_after, dtm.timedelta) else float(retry_after)


def classify(exc: TelegramError, token: str = "") -> Exception:
    """The kit's exception for what python-telegram-bot raised (Telegram's answer, or no answer).

    429 (``RetryAfter``) → rate-limited; a timeout, a cut connection, a 5xx or any answer that is
    not Telegram's JSON (``NetworkError``) → unavailable; 401/404 (``InvalidToken``) → fatal;
    403 (``Forbidden``: blocked, kicked) and the 400s that name the chat or topic → the channel;
    any other 400 → this message. ``token`` is cut out of every message (python-telegram-bot puts it
    in some).
    """
    said = exc.message.replace(token, "<token>") if token else exc.message
    detail = f"Telegram answered: {clip(said, 200)}"
    if isinstance(exc, RetryAfter):
        return RateLimited(_seconds(exc))
    if isinstance(exc, InvalidToken):
        return PlatformError(
            "Telegram refused the bot token (HTTP 401 or 404): check TELEGRAM_BOT_TOKEN"
            " (@BotFather > /mybots > your bot > API Token)",
            Refusal.FATAL,
        )
    if isinstance(exc, Forbidden):
        return PlatformError(detail + CHANNEL_HINT, Refusal.CHANNEL)
    if isinstance(exc, ChatMigrated):
        return PlatformError(
            f"the group became a supergroup with the chat id {exc.new_chat_id}: the bot answers there;"
            " put that id in allow_channels",
            Refusal.CHANNEL,
        )
    if isinstance(exc, BadRequest):
        lowered = exc.message.lower()
        if any(part in lowered for part in CHANNEL_REFUSALS):
            return PlatformError(detail + CHANNEL_HINT, Refusal.CHANNEL)
        return PlatformError(detail, Refusal.ENTRY)
    if isinstance(exc, Conflict):
        return Unavailable(f"{detail} (another process polls this bot, or a webhook is set: stop the other one)")
    if isinstance(exc, TimedOut | NetworkError):
        return Unavailable(f"Telegram could not be reached or failed: {clip(said, 200)}")
    return PlatformError(detail, Refusal.ENTRY)


def _chat(address: Address) -> int:
    return int(address.channel)


def _topic(address: Address) -> int | None:
    return int(address.thread) if address.thread else None


def _user(sender: telegram.User) -> User:
    """The kit's user: the id, and the name ``"<full name> (<id>)"`` (a name can never equal a listed id)."""
    return User(id=str(sender.id), name=f"{sender.full_name[:80]} ({sender.id})")


def _address(message: Message) -> Address:
    """A private chat or group is its chat id; a forum topic adds its ``message_thread_id``."""
    thread = str(message.message_thread_id) if message.is_topic_message and message.message_thread_id else ""
    return Address(channel=str(message.chat.id), thread=thread)


class TelegramPlatform:
    """Telegram, as the kit's :class:`~coven_codex.adapters.kit.platform.Platform` (module docstring)."""

    name = NAME

    def __init__(
        self,
        bot: telegram.Bot,
        *,
        access: AccessPolicy | None = None,
        images: ImageStore | None = None,
        listen_chats: frozenset[str] = frozenset(),
        limit: int = 4000,
        edit_interval: float = 1.5,
        budgets: Budgets | None = None,
        poll_timeout: int = 30,
        typing_every: float = TYPING_EVERY,
        webhook: WebhookReceiver | None = None,
    ) -> None:
        self.dialect: Dialect = TelegramDialect(limit)
        self.capabilities = Capabilities(edit_interval=edit_interval, can_find=False, echoes_own_messages=True)
        self.bot = bot
        self.access = access
        self.images = images
        self.listen_chats = listen_chats
        self.budgets = budgets or Budgets({})
        self.poll_timeout = poll_timeout
        self.typing_every = typing_every
        self.webhook = webhook
        self.downloads = Downloader(frozenset({urlsplit(bot.base_file_url).hostname or ""}), MAX_IMAGE_BYTES)
        self._typing: dict[Address, asyncio.Task[None]] = {}
        self._long_actions: dict[str, str] = {}
        self._me: telegram.User | None = None

    # --------------------------------------------------------------- set-up

    async def start(self) -> str:
        """Log in (``getMe``), stop any webhook (long polling), register the commands; the bot's @name.

        Raises :class:`PlatformError` when Telegram refuses the token; waits out outages.
        """
        tries = 0
        while True:
            try:
                await self.bot.initialize()
                if self.webhook is None:
                    await self.bot.delete_webhook(drop_pending_updates=False)
                else:
                    await self.bot.set_webhook(
                        self.webhook.url, secret_token=self.webhook.secret.reveal(), allowed_updates=list(UPDATES)
                    )
                break
            except TelegramError as exc:
                failed = classify(exc, self.bot.token)
                if isinstance(failed, PlatformError):
                    raise failed from None
                wait = failed.retry_after if isinstance(failed, RateLimited) else BACKOFF[min(tries, len(BACKOFF) - 1)]
                log.warning("telegram: cannot log in yet (%s); trying again in %.1f s", clip(str(failed), 200), wait)
                tries += 1
                await asyncio.sleep(wait)
        self._me = self.bot.bot
        try:
            await self.bot.set_my_commands([BotCommand(name, about) for name, about in COMMANDS])
        except TelegramError as exc:
            log.warning(
                "telegram: the command menu could not be registered (%s); typed commands still work",
                classify(exc, self.bot.token),
            )
        return f"@{self.bot.username}"

    async def close(self) -> None:
        """Stop every typing indicator and close the download session."""
        tasks = list(self._typing.values())
        self._typing.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.downloads.aclose()

    # --------------------------------------------------------------- egress

    async def _call(self, address: Address | None, operation: Callable[[], Awaitable[T]]) -> T:
        """One Bot API call within the budgets, its failure mapped onto the kit's classes."""
        async with self.budgets.take("global"):
            if address is None:
                return await self._attempt(operation)
            scope = "group" if address.channel.startswith("-") else "chat"
            async with self.budgets.take(scope, channel=address.channel):
                return await self._attempt(operation)

    async def _attempt(self, operation: Callable[[], Awaitable[T]]) -> T:
        try:
            return await operation()
        except TelegramError as exc:
            raise classify(exc, self.bot.token) from None

    def _keyboard(self, message: Outgoing) -> InlineKeyboardMarkup | None:
        if not message.buttons:
            return None
        row = [InlineKeyboardButton(b.label[:64], callback_data=self._callback_data(b.action)) for b in message.buttons]
        return InlineKeyboardMarkup([row])

    def _callback_data(self, action: str) -> str:
        """``action`` itself, or (past Telegram's 64 bytes) a digest this process resolves."""
        if len(action.encode()) <= CALLBACK_LIMIT:
            return action
        token = "#" + hashlib.sha256(action.encode()).hexdigest()[:40]
        self._long_actions[token] = action
        return token

    async def post(self, address: Address, message: Outgoing, key: str | None) -> str:
        """``sendMessage`` in HTML; refused for its markup, the same text again as plain text.
        A message with a file is ``sendDocument`` instead (:meth:`_send_document`)."""
        if message.file is not None:
            return await self._send_document(address, message, message.file)
        markup = self._keyboard(message)

        def send(text: str, mode: str | None) -> Callable[[], Awaitable[Message]]:
            return lambda: self.bot.send_message(
                _chat(address),
                text,
                parse_mode=mode,
                reply_markup=markup,
                message_thread_id=_topic(address),
                link_preview_options=NO_PREVIEW,
            )

        try:
            sent = await self._call(address, send(message.text, ParseMode.HTML))
        except PlatformError as refused:
            if PARSE_REFUSED not in str(refused).lower():
                raise
            log.info("telegram: a message's markup was refused (%s); sent as plain text", clip(str(refused), 200))
            sent = await self._call(address, send(to_plain(message.text), None))
        return str(sent.message_id)

    async def _send_document(self, address: Address, message: Outgoing, upload: FileUpload) -> str:
        """Files out: ``sendDocument`` (multipart) with the file, the text as its plain caption (at most
        1,024 characters); only from the journal's attachments folder."""
        if self.images is None:
            raise PlatformError("this adapter has no attachments folder to send files from")
        data = await asyncio.to_thread(read_upload, upload, self.images.folder)
        caption = to_plain(message.text)
        caption = caption if len(caption) <= CAPTION_LIMIT else caption[: CAPTION_LIMIT - 1] + "…"
        sent = await self._call(
            address,
            lambda: self.bot.send_document(
                _chat(address),
                InputFile(data, filename=upload.name),
                caption=caption,
                message_thread_id=_topic(address),
            ),
        )
        return str(sent.message_id)

    async def edit(self, address: Address, message_id: str, message: Outgoing) -> None:
        """``editMessageText`` (its keyboard replaced; none clears it); an unchanged text is no error."""
        markup = self._keyboard(message)

        def change(text: str, mode: str | None) -> Callable[[], Awaitable[object]]:
            return lambda: self.bot.edit_message_text(
                text,
                chat_id=_chat(address),
                message_id=int(message_id),
                parse_mode=mode,
                reply_markup=markup,
                link_preview_options=NO_PREVIEW,
            )

        try:
            await self._call(address, change(message.text, ParseMode.HTML))
        except PlatformError as refused:
            said = str(refused).lower()
            if NOT_MODIFIED in said:
                return
            if PARSE_REFUSED not in said:
                raise
            try:
                await self._call(address, change(to_plain(message.text), None))
            except PlatformError as again:
                if NOT_MODIFIED not in str(again).lower():
                    raise

    async def delete(self, address: Address, message_id: str) -> None:
        """``deleteMessage``."""
        await self._call(None, lambda: self.bot.delete_message(_chat(address), int(message_id)))

    async def typing(self, address: Address, active: bool) -> None:
        """``sendChatAction typing`` now, then every :data:`TYPING_EVERY` s until ``active`` is False."""
        running = self._typing.pop(address, None)
        if running is not None:
            running.cancel()
        if not active:
            return
        await self._attempt(lambda: self._chat_action(address))
        self._typing[address] = asyncio.create_task(self._keep_typing(address))

    async def _chat_action(self, address: Address) -> bool:
        return await self.bot.send_chat_action(_chat(address), ChatAction.TYPING, message_thread_id=_topic(address))

    async def _keep_typing(self, address: Address) -> None:
        loop = asyncio.get_running_loop()
        until = loop.time() + TYPING_MAX
        while loop.time() < until:
            await asyncio.sleep(self.typing_every)
            try:
                await self._chat_action(address)
            except TelegramError as exc:
                log.debug("telegram: the typing indicator was not shown: %s", classify(exc, self.bot.token))
        self._typing.pop(address, None)

    async def find(self, address: Address, key: str) -> str | None:
        """Telegram cannot answer (a bot cannot read a chat's history): never asked (``can_find`` False)."""
        return None

    # --------------------------------------------------------------- ingress

    def incoming(self) -> AsyncIterator[Incoming]:
        """Users' messages and button presses, by long polling (or from the webhook)."""
        return self._updates() if self.webhook is None else self._posted(self.webhook)

    async def _posted(self, webhook: WebhookReceiver) -> AsyncIterator[Incoming]:
        async for update, done in webhook.updates():
            event = await self._event(update)
            if event is not None:
                yield event  # handled by the runner before Telegram is answered 200
            if not done.done():
                done.set_result(None)

    async def _updates(self) -> AsyncIterator[Incoming]:
        offset: int | None = None
        tries = 0
        while True:
            try:
                updates: Sequence[Update] = await self.bot.get_updates(
                    offset=offset, timeout=self.poll_timeout, allowed_updates=list(UPDATES)
                )
            except TelegramError as exc:
                failed = classify(exc, self.bot.token)
                if isinstance(failed, PlatformError) and failed.refusal is Refusal.FATAL:
                    raise failed from None
                wait = failed.retry_after if isinstance(failed, RateLimited) else BACKOFF[min(tries, len(BACKOFF) - 1)]
                log.log(
                    logging.WARNING if tries == 0 else logging.DEBUG,
                    "telegram: getUpdates failed (%s); polling again in %.1f s",
                    clip(str(failed), 200),
                    wait,
                )
                tries += 1
                await asyncio.sleep(wait)
                continue
            tries = 0
            for update in updates:
                event = await self._event(update)
                if event is not None:
                    yield event  # handled by the runner before the offset moves past it
                offset = update.update_id + 1

    async def _event(self, update: Update) -> Incoming | None:
        if update.callback_query is not None:
            return await self._press(update.callback_query)
        message = update.message
        if message is None or message.from_user is None or message.from_user.is_bot:
            return None  # other bots, the bot itself, channel posts, service messages
        if not self._addressed(message):
            return None
        text = self._text(message)
        user, address = _user(message.from_user), _address(message)
        allowed = self.access is None or self.access.refusal(user, address) is None
        images = await self._images(message, address) if allowed else ()  # a stranger's: never fetched
        if not text and not images and not (message.photo or message.document):
            return None
        return IncomingMessage(address, user, text, images, message_id=f"{message.chat.id}:{message.message_id}")

    def _addressed(self, message: Message) -> bool:
        """For the bot: a private chat, a listened-to group, a mention, a reply to the bot, its command."""
        if message.chat.type == "private" or str(message.chat.id) in self.listen_chats:
            return True
        me = self._me
        if me is None:
            return False
        replied = message.reply_to_message
        if (
            replied is not None
            and replied.forum_topic_created is None
            and replied.from_user is not None
            and replied.from_user.id == me.id
        ):
            return True
        for entity, value in self._entities(message).items():
            if entity.type == MessageEntity.MENTION and value.lower() == f"@{me.username}".lower():
                return True
            if entity.type == MessageEntity.TEXT_MENTION and entity.user is not None and entity.user.id == me.id:
                return True
            if entity.type == MessageEntity.BOT_COMMAND and entity.offset == 0:
                _, at, target = value.partition("@")
                return not at or target.lower() == (me.username or "").lower()
        return False

    @staticmethod
    def _entities(message: Message) -> dict[MessageEntity, str]:
        if message.text is not None:
            return dict(message.parse_entities())
        if message.caption is not None:
            return dict(message.parse_caption_entities())
        return {}

    def _text(self, message: Message) -> str:
        """The text (or caption) without the bot's ``@name`` (a command's ``/status@bot`` becomes ``/status``).

        Telegram's ``/start`` (what a user's first tap on the bot sends) is the kit's ``/help``.
        """
        text = message.text or message.caption or ""
        me = self._me
        if me is not None and me.username:
            mention = f"@{me.username}"
            if text.startswith("/"):
                first, space, rest = text.partition(" ")
                text = first.split("@", 1)[0] + space + rest
            text = text.replace(mention, "")
        text = text.strip()
        return "/help" if text == "/start" or text.startswith("/start ") else text

    async def _images(self, message: Message, address: Address) -> tuple[Attachment, ...]:
        """The message's photo or image document, fetched through ``getFile`` and stored (one notice if not)."""
        if self.images is None:
            return ()
        file_id, name, declared = "", "", 0
        if message.photo:
            largest = message.photo[-1]
            file_id, name, declared = largest.file_id, "photo", largest.file_size or 0
        elif message.document is not None:
            document = message.document
            name = document.file_name or "document"
            if not (document.mime_type or "").startswith("image/"):
                await self._notice(
                    address, f"left out {clip(name, 64)}: only images (PNG, JPEG, GIF, WebP) go to Codex"
                )
                return ()
            file_id, declared = document.file_id, document.file_size or 0
        if not file_id:
            return ()
        problem = ""
        if declared > MAX_IMAGE_BYTES:
            problem = f"larger than {MAX_IMAGE_BYTES // 2**20} MiB"
        else:
            try:
                found = await self._attempt(lambda: self.bot.get_file(file_id))
                if not found.file_path:
                    raise DownloadRefused("Telegram gave no file path")
                data = await self.downloads.fetch(found.file_path)
                return ((await self.images.save(data)).attachment(),)
            except (PlatformError, RateLimited, Unavailable) as exc:
                problem = f"not downloaded: {clip(str(exc), 120)}"
            except DownloadRefused as exc:
                problem = f"not downloaded: {clip(str(exc), 120)}"
            except UploadError as exc:
                problem = clip(str(exc), 120)
        await self._notice(
            address, f"left out {clip(name, 64)} ({problem}); only PNG, JPEG, GIF and WebP images go to Codex"
        )
        return ()

    async def _notice(self, address: Address, text: str) -> None:
        try:
            await self._call(
                address,
                lambda: self.bot.send_message(_chat(address), escape(text), message_thread_id=_topic(address)),
            )
        except (PlatformError, RateLimited, Unavailable) as exc:
            log.warning("telegram: a notice could not be posted: %s", clip(str(exc), 200))

    async def _press(self, query: CallbackQuery) -> Incoming | None:
        """A button press: answered at once (Telegram stops the button's spinner), then the kit's action."""
        action = query.data or ""
        known = self._long_actions.get(action) if action.startswith("#") else action
        try:
            await query.answer(None if known else "this button is from before a restart: type the command instead")
        except TelegramError as exc:
            log.info("telegram: a button press could not be answered: %s", classify(exc, self.bot.token))
        message = query.message
        if not known or message is None:
            return None
        thread = ""
        if isinstance(message, Message) and message.is_topic_message and message.message_thread_id:
            thread = str(message.message_thread_id)
        address = Address(channel=str(message.chat.id), thread=thread)
        return ButtonPress(address, _user(query.from_user), known, str(message.message_id))


# ------------------------------------------------------------------- running


@dataclass(frozen=True, slots=True)
class Reached:
    """What ``getMe`` said: the bot's name, a refused token, or no answer."""

    reached: bool
    refused: bool
    detail: str


async def reach(token: Secret, api_url: str | None = None) -> Reached:
    """Ask Telegram ``getMe`` once with ``token`` (``coven-codex validate``); never raises for an answer."""
    bot = make_bot(token, api_url)
    try:
        async with asyncio.timeout(REACH_TIMEOUT):
            me = await bot.get_me()
    except TelegramError as exc:
        failed = classify(exc, token.reveal())
        refused = isinstance(failed, PlatformError) and failed.refusal is Refusal.FATAL
        return Reached(reached=refused, refused=refused, detail=str(failed))
    except TimeoutError:
        return Reached(reached=False, refused=False, detail=f"no answer within {REACH_TIMEOUT:g} s")
    finally:
        await _shutdown(bot)
    return Reached(reached=True, refused=False, detail=f"Telegram knows the bot as @{me.username}")


def make_bot(token: Secret, api_url: str | None = None) -> telegram.Bot:
    """A :class:`telegram.Bot` on ``api_url`` (Telegram's by default), with its own connection pools."""
    base = (api_url or API_URL).rstrip("/")
    request = HTTPXRequest(
        connection_pool_size=32, read_timeout=20.0, write_timeout=20.0, connect_timeout=10.0, pool_timeout=20.0
    )
    polling = HTTPXRequest(connection_pool_size=2, read_timeout=10.0, connect_timeout=10.0, pool_timeout=10.0)
    return telegram.Bot(
        token.reveal(),
        base_url=f"{base}/bot",
        base_file_url=f"{base}/file/bot",
        request=request,
        get_updates_request=polling,
    )


def budgets(section: TelegramSection) -> Budgets:
    """The section's limits as the kit's budgets: ``global``, ``chat`` and ``group``.

    A private chat's limit is a pace, not a minute's allowance: Telegram asks for no more than
    about one message a second in a chat, so its bucket holds one call (``chat_per_minute / 60``
    a second, no burst); a group's holds a minute's 20."""
    limits = "https://core.telegram.org/bots/faq#my-bot-is-hitting-limits-how-do-i-avoid-this"
    return Budgets(
        {
            "global": Rate(section.global_per_second, 1.0, Scope.APP, limits),
            "chat": Rate(section.chat_per_minute / 60.0, 1.0, Scope.CHANNEL, limits),
            "group": Rate(section.group_per_minute, 60.0, Scope.CHANNEL, limits),
        }
    )


@dataclass(frozen=True, slots=True)
class TelegramSettings:
    """What :func:`run_telegram` needs: the journal, the bot token and the ``[adapters.telegram]`` section."""

    journal: JournalName
    token: Secret
    section: TelegramSection
    webhook_secret: Secret | None = None
    """The secret Telegram sends with each update (webhook mode)."""
    api_url: str | None = None
    """Overrides the section's ``api_url`` (the tests' fake Bot API)."""


async def run_telegram(settings: TelegramSettings, started: Callable[[str], None] | None = None) -> None:
    """Run the Telegram adapter until cancelled.

    ``started`` is called with the bot's ``@name`` once it is logged in and the runner follows the
    journal. Raises :class:`PlatformError` when Telegram refuses the token.
    """
    for logger, level in QUIET_LOGGERS.items():
        logging.getLogger(logger).setLevel(max(level, logging.getLogger(logger).getEffectiveLevel()))
    section = settings.section
    access = section.access_policy()
    bot = make_bot(settings.token, settings.api_url or section.api_url)
    base = local_base(settings.journal, state_root())
    platform = TelegramPlatform(
        bot,
        access=access,
        images=ImageStore(uploads_dir(base)),
        listen_chats=frozenset(section.listen_chats),
        limit=section.message_limit,
        edit_interval=section.edit_interval,
        budgets=budgets(section),
        poll_timeout=section.poll_timeout,
        webhook=(
            WebhookReceiver(
                bot, settings.webhook_secret, section.webhook_url, section.webhook_host, section.webhook_port
            )
            if section.mode == "webhook" and section.webhook_url and settings.webhook_secret is not None
            else None
        ),
    )
    journal = open_journal(settings.journal)
    ledger = DeliveryLedger.open(ledger_path(base, NAME))
    try:
        if platform.webhook is not None:
            try:
                await platform.webhook.start()
            except OSError as exc:
                raise PlatformError(
                    f"cannot listen for Telegram's webhook on {section.webhook_host}:{section.webhook_port}:"
                    f" {exc.strerror}; choose a free webhook_port",
                    Refusal.FATAL,
                ) from None
        name = await platform.start()
        runner = AdapterRunner(
            journal,
            platform,
            section.channel_map(),
            access,
            ledger,
            name=NAME,
            options=section.runner_options(),
            metrics=section.metrics,
        )
        announce = asyncio.create_task(_announce(runner, name, started))
        try:
            await runner.run()
        finally:
            announce.cancel()
            await asyncio.gather(announce, return_exceptions=True)
    finally:
        if platform.webhook is not None:
            await platform.webhook.close()
        await platform.close()
        await _shutdown(bot)
        ledger.close()
        await journal.aclose()


async def _announce(runner: AdapterRunner, name: str, started: Callable[[str], None] | None) -> None:
    await runner.ready.wait()
    if started is not None:
        started(name)


async def _shutdown(bot: telegram.Bot) -> None:
    try:
        await bot.shutdown()
    except TelegramError as exc:
        log.debug("telegram: closing the connections: %s", classify(exc, bot.token))
