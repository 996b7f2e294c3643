"""Slack as the kit's :class:`~coven_codex.adapters.kit.platform.Platform`, and :func:`run_slack`.

- **Out**: ``chat.postMessage`` in the conversation's thread, with Block Kit sections and buttons
  (:mod:`.dialect`) and message ``metadata`` ``{"event_type": "coven_delivery", "event_payload":
  {"key": <ledger key>}}``; ``chat.update`` for streamed replies; :meth:`SlackPlatform.find` reads
  the thread (``conversations.replies``) or the channel (``conversations.history``) with
  ``include_all_metadata`` for a message of this bot carrying the key: exactly once across restarts.
  Slack's answers are mapped onto the kit's classification (:func:`classify`): HTTP 429 is
  :class:`~coven_codex.adapters.kit.platform.RateLimited` with Slack's ``Retry-After``; a 5xx, a
  network failure, ``internal_error``/``fatal_error``/``service_unavailable`` are
  :class:`~coven_codex.adapters.kit.platform.Unavailable` (retried, the post looked up first);
  the token's refusals are fatal; ``is_archived``, ``not_in_channel``, ``channel_not_found`` … refuse
  the channel; any other error refuses that message (the kit falls back, then shows a notice).
- **In** (a ``slack_bolt`` :class:`AsyncApp`, Socket Mode or HTTP): ``app_mention`` anywhere (a
  top-level mention starts a thread: the thread is the conversation), ``message`` in DMs, button
  presses (``block_actions`` whose ``value`` is the kit's command line) and the slash command
  (``/codex cancel|new|status|approve|deny|help``). The app runs with ``process_before_response``:
  Slack's acknowledgement is sent once the runner has appended the thought (at most
  :data:`ACK_WAIT` seconds later), so an adapter killed before that gets the event again, and
  the kit's ledger makes it one thought (its id comes from the message's channel and ``ts``).
- Images shared with a message by a sender the access policy lets in are downloaded with the bot
  token (only from Slack's own hosts, whole and at most 10 MiB, :mod:`~coven_codex.adapters.kit.downloads`)
  into the attachments folder the web page uses and sent as the thought's attachments; a stranger's
  files are never fetched.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from slack_bolt.async_app import AsyncAck, AsyncApp
from slack_sdk.errors import SlackApiError, SlackRequestError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from coven_codex.adapters.kit.access import AccessPolicy
from coven_codex.adapters.kit.budget import Budgets, Rate, Scope
from coven_codex.adapters.kit.config import SlackSection
from coven_codex.adapters.kit.downloads import Downloader, DownloadRefused
from coven_codex.adapters.kit.files import read_upload
from coven_codex.adapters.kit.ledger import DeliveryLedger, content_digest, ledger_path
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
from coven_codex.adapters.kit.runner import AdapterRunner
from coven_codex.adapters.kit.threads import ContextLimits, EarlierMessage, FollowedThreads, with_context
from coven_codex.adapters.slack.dialect import BUTTON_PREFIX, THREAD_MARK, SlackDialect, blocks, fallback_text, menu
from coven_codex.attachments import MAX_IMAGE_BYTES, ImageStore, UploadError, uploads_dir
from coven_codex.entries import Attachment
from coven_codex.journal.opening import JournalName, local_base, open_journal
from coven_codex.settings import state_root
from coven_codex.support.secret import Secret

log = logging.getLogger(__name__)

NAME = "slack"
METADATA_EVENT = "coven_delivery"
"""The ``event_type`` of the metadata on every message the adapter posts for a journal entry."""
SLASH_COMMAND = "/codex"
ACK_WAIT = 2.5
"""Seconds an event's acknowledgement waits for the runner (Slack wants it within 3 s, else it retries)."""
FIND_PAGES = 50
"""Pages of 200 messages :meth:`SlackPlatform.find` reads at most (a thread of 10,000 messages)."""
CACHE_SECONDS = 60.0
"""How long user names and user-group members are kept before being asked again."""
DEFAULT_RETRY_AFTER = 1.0
FILE_HOSTS = frozenset({"files.slack.com", "slack-files.com"})
"""Hosts the bot token is sent to for a file download (besides the Web API's own host)."""

REQUIRED_SCOPES: dict[str, str] = {
    "app_mentions:read": "the app_mention event",
    "assistant:write": "assistant.threads.setSuggestedPrompts (an AI app's assistant thread)",
    "channels:history": "the message.channels event (follow-ups in a thread without a mention) and"
    " conversations.replies/history in public channels (a thread's earlier messages; finding a message after a crash)",
    "chat:write": "chat.postMessage, chat.update, chat.delete, assistant.threads.setStatus",
    "commands": f"the {SLASH_COMMAND} slash command",
    "files:read": "downloading images shared with a message",
    "groups:history": "the message.groups event and conversations.replies/history in private channels",
    "im:history": "the message.im event and conversations.replies/history in DMs",
    "reactions:write": "reactions.add/remove: the sign that Codex works where thread status is not available",
    "usergroups:read": "usergroups.users.list (allow_groups)",
    "users:read": "users.info (names as thoughts' senders)",
}
"""The bot token scopes the adapter uses, and what for (examples/slack-manifest.json asks for exactly these)."""
RATE_LIMITS_DOC = "https://docs.slack.dev/apis/web-api/rate-limits"
POST_BURST = 3
"""Posts to one channel the budget lets through at once (Slack: "short bursts >1 allowed")."""


def rates(post_rate: float = 1.0) -> dict[str, Rate]:
    """Slack's documented limits for the methods the adapter calls, which its budgets keep under.

    Tier 3 (50+ a minute) and Tier 4 (100+) per method and workspace; ``chat.postMessage`` is
    "special": about ``post_rate`` (Slack: 1) messages a second per channel, short bursts allowed.
    """
    tier3 = Rate(50, 60.0, Scope.WORKSPACE, f"{RATE_LIMITS_DOC} (Tier 3)")
    return {
        "chat.postMessage": Rate(POST_BURST, POST_BURST / post_rate, Scope.CHANNEL, f"{RATE_LIMITS_DOC} (Special)"),
        "chat.update": tier3,
        "chat.delete": tier3,
        "conversations.replies": tier3,
        "conversations.history": tier3,
        "users.info": Rate(100, 60.0, Scope.WORKSPACE, f"{RATE_LIMITS_DOC} (Tier 4)"),
        "usergroups.users.list": Rate(20, 60.0, Scope.WORKSPACE, f"{RATE_LIMITS_DOC} (Tier 2)"),
        # (setStatus: "special", undocumented in figures: kept to Tier 3's)
        "assistant.threads.setStatus": Rate(50, 60.0, Scope.WORKSPACE, f"{RATE_LIMITS_DOC} (Special; as Tier 3)"),
        "assistant.threads.setSuggestedPrompts": Rate(100, 60.0, Scope.WORKSPACE, f"{RATE_LIMITS_DOC} (Tier 4)"),
        "reactions.add": tier3,
        "reactions.remove": Rate(20, 60.0, Scope.WORKSPACE, f"{RATE_LIMITS_DOC} (Tier 2)"),
        "files.getUploadURLExternal": Rate(100, 60.0, Scope.WORKSPACE, f"{RATE_LIMITS_DOC} (Tier 4)"),
        "files.completeUploadExternal": Rate(100, 60.0, Scope.WORKSPACE, f"{RATE_LIMITS_DOC} (Tier 4)"),
    }


STATUS = "is working…"
"""The thread status (``assistant.threads.setStatus``) shown while a turn runs."""
REACTION = "hourglass_flowing_sand"
"""The reaction on the user's message that shows a turn runs where Slack has no thread status for the app."""
TYPING_REFRESH = 20.0
"""Seconds after which the thread status is set again while a turn runs: Slack clears it when the
bot posts (a progress card) and after two minutes without a message."""
BOT_EVENTS = ("app_mention", "assistant_thread_started", "message.channels", "message.groups", "message.im")
"""The events the app subscribes to."""
CHANNEL_TYPES = frozenset({"channel", "group"})
"""The ``channel_type`` of a ``message`` event in a public (``message.channels``) or private
(``message.groups``) channel: taken only in a thread the bot follows."""
MESSAGE_SUBTYPES = (None, "file_share", "thread_broadcast")
"""The ``message`` subtypes that are a user writing (edits, deletions, joins … are not)."""
PROMPTS_TITLE = "Try asking Codex"
SUGGESTED_PROMPTS = (
    ("What can you do?", "/help"),
    ("Explain this repository", "Explain what this repository does and how it is laid out."),
    ("Review the latest change", "Review the latest commit in this repository and point out what could break."),
    ("Status", "/status"),
)
"""The prompts (title, message sent when clicked) an AI app's new assistant thread offers (Slack shows up to 4)."""
CONTEXT_WAIT = 2.0
"""Seconds the first mention in a thread waits for the thread's earlier messages (within Slack's 3 s)."""
ENTER_WAIT = 10.0
"""Seconds a follow-up waits at most for the first mention of its thread to be handed on."""
CONTEXT_PAGES = 5
"""Pages of 200 earlier messages read at most for a thread's context."""

_MENTION = re.compile(r"^\s*<@[A-Z0-9]+(?:\|[^>]*)?>[\s:,]*")


RETRY_ERRORS = frozenset({"internal_error", "fatal_error", "service_unavailable", "request_timeout"})
"""Slack's error codes for a failure on its side ("it's possible some aspect of the operation succeeded")."""
FATAL_ERRORS = frozenset(
    {"invalid_auth", "not_authed", "token_revoked", "token_expired", "account_inactive", "org_login_required"}
)
"""The bot token is refused: nothing can work until it is replaced."""
CHANNEL_ERRORS = frozenset(
    {
        "channel_not_found",
        "not_in_channel",
        "is_archived",
        "thread_not_found",
        "restricted_action",
        "restricted_action_read_only_channel",
        "restricted_action_thread_only_channel",
        "restricted_action_non_threadable_channel",
        "access_denied",
        "ekm_access_denied",
        "team_access_not_granted",
        "missing_scope",
    }
)
"""The bot may not post at that address (every message there would be refused)."""


SCOPES_HEADER = "x-oauth-scopes"
"""The header of Slack's answers listing the scopes the token was granted."""


def missing_scopes(headers: Any) -> list[str] | None:
    """The :data:`REQUIRED_SCOPES` the token lacks, from an answer's :data:`SCOPES_HEADER`; None when
    the answer does not say (a proxy that drops the header)."""
    granted = headers.get(SCOPES_HEADER) if headers is not None else None
    if isinstance(granted, list):
        granted = ",".join(str(g) for g in granted)
    if not isinstance(granted, str):
        return None
    have = {scope.strip() for scope in granted.split(",")}
    return [scope for scope in REQUIRED_SCOPES if scope not in have]


def describe_missing(missing: list[str]) -> str:
    """What the missing scopes stop working, one clause each."""
    return "; ".join(f"{scope} ({REQUIRED_SCOPES[scope]})" for scope in missing)


@dataclass(frozen=True, slots=True)
class ScopeCheck:
    """What ``auth.test`` said of the bot token: ``refused`` (the token), ``reached`` (Slack answered),
    the ``missing`` scopes (None: Slack did not say), and ``detail`` (no secret in it)."""

    reached: bool
    refused: bool
    missing: list[str] | None
    detail: str


async def check_scopes(token: Secret, api_url: str | None) -> ScopeCheck:
    """Ask Slack (``auth.test``) which scopes the bot token has (``coven-codex validate``'s ``slack_scopes``)."""
    client = AsyncWebClient(token=token.reveal(), base_url=_api_url(api_url), retry_handlers=[], timeout=10)
    try:
        answer = await client.auth_test()
    except SlackApiError as exc:
        data = exc.response.data if isinstance(exc.response, AsyncSlackResponse) else None
        error = str((data.get("error") if isinstance(data, dict) else None) or "refused")
        status = int(getattr(exc.response, "status_code", 0) or 0)
        kind = classify("auth.test", status, error, 0.0)
        if isinstance(kind, PlatformError):
            return ScopeCheck(True, True, None, f"Slack refused auth.test: {clip(error, 80)}{_hint(error)}")
        return ScopeCheck(False, False, None, f"Slack failed auth.test ({kind})")
    except (aiohttp.ClientError, TimeoutError) as exc:
        return ScopeCheck(False, False, None, f"Slack could not be reached ({type(exc).__name__})")
    return ScopeCheck(True, False, missing_scopes(answer.headers), f"Slack knows the bot as {answer.get('user_id')}")


def classify(method: str, status: int, error: str, retry_after: float) -> Exception:
    """The kit's exception for Slack's answer to ``method`` (HTTP ``status``, ``error`` code)."""
    if status == 429 or error == "ratelimited":
        return RateLimited(retry_after)
    if status >= 500 or error in RETRY_ERRORS:
        return Unavailable(f"Slack failed {method} (HTTP {status}{', ' + error if error else ''})")
    detail = f"Slack refused {method}: {clip(error or f'HTTP {status}', 100)}{_hint(error)}"
    if error in FATAL_ERRORS or status == 401:
        return PlatformError(detail, Refusal.FATAL)
    if error in CHANNEL_ERRORS or status == 403:
        return PlatformError(detail, Refusal.CHANNEL)
    return PlatformError(detail, Refusal.ENTRY)


@dataclass(frozen=True, slots=True)
class SlackIdentity:
    """Who the bot is (``auth.test``): its workspace, its user id and its bot id."""

    team_id: str
    user_id: str
    bot_id: str


@dataclass
class _Cache:
    names: dict[str, tuple[float, str]] = field(default_factory=dict)
    groups: dict[str, frozenset[str]] = field(default_factory=dict)
    groups_at: float = float("-inf")
    warned: set[str] = field(default_factory=set)


def _shared_ts(answer: AsyncSlackResponse, channel: str) -> str:
    """The ``ts`` of the message that shares the uploaded file in ``channel`` (``file:<id>`` when
    Slack's answer does not say yet: it shares files asynchronously)."""
    files = answer.get("files") or []
    first = files[0] if files and isinstance(files[0], dict) else {}
    shares = first.get("shares") or {}
    for visibility in ("public", "private"):
        places = (shares.get(visibility) or {}).get(channel) or []
        if places and isinstance(places[0], dict) and places[0].get("ts"):
            return str(places[0]["ts"])
    return f"file:{first.get('id') or ''}"


class SlackPlatform:
    """Slack through ``slack_sdk``'s :class:`AsyncWebClient` (out) and a bolt app's listeners (in)."""

    name = NAME

    def __init__(
        self,
        client: AsyncWebClient,
        token: Secret,
        images: ImageStore,
        *,
        edit_interval: float = 1.2,
        groups: frozenset[str] = frozenset(),
        access: AccessPolicy | None = None,
        post_rate: float = 1.0,
        follows: FollowedThreads | None = None,
        context: ContextLimits = ContextLimits(),  # noqa: B008 - frozen, shared safely
    ) -> None:
        self.dialect: Dialect = SlackDialect()
        self.capabilities = Capabilities(
            edit_interval=edit_interval, can_find=True, echoes_own_messages=True, typing_refresh=TYPING_REFRESH
        )
        self.client = client
        self.images = images
        self.groups = groups
        self.access = access
        """Whose files are downloaded (the runner's policy: a stranger's are never fetched)."""
        self.follows = follows
        """The threads whose messages reach Codex without a mention (None: only mentions and DMs)."""
        self.context = context
        self.identity = SlackIdentity("", "", "")
        self._token = token
        self._queue: asyncio.Queue[tuple[Incoming, asyncio.Future[None]] | None] = asyncio.Queue()
        self._cache = _Cache()
        self._last_thread: dict[tuple[str, str], str] = {}
        self._last_message: dict[tuple[str, str], str] = {}
        """The ``ts`` of the last user message per (channel, thread): where the working reaction goes."""
        self._no_status: set[str] = set()
        """Channels where Slack refused a thread status: the reaction is used there."""
        self._reacted: dict[tuple[str, str], str] = {}
        self._unreachable = False
        self._no_prompts = False
        """Slack refused suggested prompts (not an AI app, a scope missing): not asked again."""
        self._entering: dict[str, asyncio.Event] = {}
        """Conversations whose first mention is being handled (its context read): follow-ups wait for it."""
        self.budgets = Budgets(rates(post_rate))
        api_host = urlsplit(client.base_url).hostname or ""
        self._files = Downloader(FILE_HOSTS | {api_host}, MAX_IMAGE_BYTES)

    # ------------------------------------------------------------------ Web API

    async def _api(self, method: str, *, get: bool = False, **arguments: Any) -> AsyncSlackResponse:
        """Call ``method`` within its budget; Slack's refusals and failures as classified by :func:`classify`."""
        async with self._classified(method):
            async with self.budgets.take(method, self.identity.team_id, str(arguments.get("channel") or "")):
                if get:
                    answer = await self.client.api_call(method, http_verb="GET", params=arguments)
                else:
                    answer = await self.client.api_call(method, json=arguments)
            if self._unreachable:
                self._unreachable = False
                log.warning("slack: reachable again")
            return answer
        raise AssertionError("unreachable")  # (the context manager raises or the call returned)

    @contextlib.asynccontextmanager
    async def _classified(self, method: str) -> AsyncIterator[None]:
        """Slack's refusals and failures of ``method`` as classified by :func:`classify`."""
        try:
            yield
        except SlackApiError as exc:
            # A body that is not JSON (a proxy's HTML error page) leaves slack_sdk's own response out.
            response = exc.response
            status = int(getattr(response, "status_code", None) or getattr(response, "status", 0) or 0)
            error = ""
            if isinstance(response, AsyncSlackResponse) and isinstance(response.data, dict):
                error = str(response.data.get("error") or "")
            raise classify(method, status, error, _retry_after(getattr(response, "headers", None))) from None
        except (aiohttp.ClientError, TimeoutError) as exc:
            # A network failure: the kit looks a post up and retries with backoff, so nothing is lost.
            level = logging.DEBUG if self._unreachable else logging.WARNING
            log.log(level, "slack: %s failed (%s); it is tried again", method, type(exc).__name__)
            self._unreachable = True
            raise Unavailable(f"Slack could not be reached for {method} ({type(exc).__name__})") from None

    async def start(self) -> SlackIdentity:
        """Ask Slack who the bot is (``auth.test``); :class:`PlatformError` when it refuses the token."""
        for wait in (1.0, 2.0, 4.0, 8.0, 0.0):
            try:
                answer = await self._api("auth.test")
                break
            except RateLimited as limited:
                await asyncio.sleep(min(limited.retry_after, 60.0))
            except Unavailable as failed:
                if not wait:
                    raise PlatformError(f"{failed}; check the network and api_url, then start again") from None
                await asyncio.sleep(wait)
        else:
            raise PlatformError("Slack kept rate-limiting auth.test; start again in a minute")
        self.identity = SlackIdentity(
            str(answer.get("team_id") or ""), str(answer.get("user_id") or ""), str(answer.get("bot_id") or "")
        )
        missing = missing_scopes(answer.headers)
        if missing:
            log.warning(
                "slack: the bot token lacks %s; add them to the app (examples/slack-manifest.json lists every"
                " scope) and reinstall it",
                describe_missing(missing),
            )
        return self.identity

    async def aclose(self) -> None:
        """End the incoming stream and close the download session."""
        self._queue.put_nowait(None)
        await self._files.aclose()

    async def post(self, address: Address, message: Outgoing, key: str | None) -> str:
        """``chat.postMessage`` in the thread, carrying ``key`` in its metadata; the message's ``ts``.
        A message with a file is an upload instead (:meth:`_upload`)."""
        if message.file is not None:
            return await self._upload(address, message, message.file)
        arguments: dict[str, Any] = {
            "channel": address.channel,
            "text": fallback_text(message),
            "blocks": blocks(message),
            "unfurl_links": False,
            "unfurl_media": False,
        }
        if address.thread:
            arguments["thread_ts"] = address.thread
        if key is not None:
            arguments["metadata"] = {"event_type": METADATA_EVENT, "event_payload": {"key": key}}
        answer = await self._api("chat.postMessage", **arguments)
        return str(answer["ts"])

    async def _upload(self, address: Address, message: Outgoing, upload: FileUpload) -> str:
        """Files out: ``files_upload_v2`` (``files.getUploadURLExternal``, the bytes to the upload URL,
        ``files.completeUploadExternal``) in the thread, the text as its comment; the ``ts`` of the
        message sharing it (``file:<id>`` while Slack has not shared it yet). Files carry no metadata:
        an upload whose answer is lost is found by its text among the bot's file messages
        (:meth:`find_by_content`)."""
        data = await asyncio.to_thread(read_upload, upload, self.images.folder)
        team, channel = self.identity.team_id, address.channel
        async with self._classified("files_upload_v2"):
            async with (
                self.budgets.take("files.getUploadURLExternal", team, channel),
                self.budgets.take("files.completeUploadExternal", team, channel),
            ):
                try:
                    answer = await self.client.files_upload_v2(
                        channel=channel,
                        thread_ts=address.thread or None,
                        content=data,
                        filename=upload.name,
                        title=upload.name,
                        initial_comment=fallback_text(message),
                    )
                except SlackRequestError as exc:  # the upload URL answered other than 200
                    raise Unavailable(f"Slack did not take the file's bytes ({exc})") from None
            return _shared_ts(answer, channel)
        raise AssertionError("unreachable")  # (the context manager raises or the upload returned)

    async def find_by_content(self, address: Address, since: float, digest: str) -> list[str]:
        """The ``ts`` of the bot's messages with files at ``address`` whose text has ``digest``, oldest
        first (an upload whose answer was lost; text posts are found by key). ``since`` is not compared:
        the runner takes the first one no other key owns."""
        if address.thread:
            arguments: dict[str, Any] = {"channel": address.channel, "limit": 200, "ts": address.thread}
            answer = await self._api("conversations.replies", get=True, **arguments)
        else:
            answer = await self._api("conversations.history", get=True, channel=address.channel, limit=200)
        mine = {self.identity.bot_id, self.identity.user_id} - {""}
        found = [
            message
            for message in answer.get("messages") or []
            if message.get("files")
            and (not mine or {message.get("bot_id"), message.get("user")} & mine)
            and content_digest(str(message.get("text") or "")) == digest
        ]
        return [str(message["ts"]) for message in sorted(found, key=lambda m: float(m["ts"]))]

    async def edit(self, address: Address, message_id: str, message: Outgoing) -> None:
        """``chat.update`` of the message ``message_id`` (its ``ts``)."""
        await self._api(
            "chat.update", channel=address.channel, ts=message_id, text=fallback_text(message), blocks=blocks(message)
        )

    async def delete(self, address: Address, message_id: str) -> None:
        """``chat.delete``."""
        await self._api("chat.delete", channel=address.channel, ts=message_id)

    async def typing(self, address: Address, active: bool) -> None:
        """A sign that Codex works: the thread's status ("is working…", ``assistant.threads.setStatus``)
        where Slack has it for the app, else a reaction (:data:`REACTION`) on the user's message."""
        if address.thread and address.channel not in self._no_status:
            try:
                await self._api(
                    "assistant.threads.setStatus",
                    channel_id=address.channel,
                    thread_ts=address.thread,
                    status=STATUS if active else "",
                )
                return
            except PlatformError as refused:
                if refused.refusal is Refusal.FATAL:
                    raise
                self._no_status.add(address.channel)
                self._warn_once(
                    "status", f"no thread status here ({refused}); a reaction shows that Codex works instead"
                )
        await self._react(address, active)

    async def _react(self, address: Address, active: bool) -> None:
        """The working reaction on the last user message of the thread: added once, removed at the end."""
        where = (address.channel, address.thread)
        if not active:
            ts = self._reacted.pop(where, None)
            if ts is not None:
                await self._quietly("reactions.remove", channel=address.channel, timestamp=ts, name=REACTION)
            return
        ts = self._last_message.get(where) or address.thread
        if not ts or self._reacted.get(where) == ts:
            return
        self._reacted[where] = ts
        await self._quietly("reactions.add", channel=address.channel, timestamp=ts, name=REACTION)

    async def _quietly(self, method: str, **arguments: Any) -> None:
        """Call ``method``; Slack's ``already_reacted``/``no_reaction`` mean it is done already."""
        try:
            await self._api(method, **arguments)
        except PlatformError as refused:
            if refused.refusal is Refusal.FATAL or not any(
                error in str(refused) for error in ("already_reacted", "no_reaction")
            ):
                raise

    async def find(self, address: Address, key: str) -> str | None:
        """The ``ts`` of this bot's message carrying ``key`` in its metadata, in the thread or channel."""
        cursor = ""
        for _ in range(FIND_PAGES):
            arguments: dict[str, Any] = {"channel": address.channel, "limit": 200, "include_all_metadata": True}
            if cursor:
                arguments["cursor"] = cursor
            if address.thread:
                answer = await self._api("conversations.replies", get=True, ts=address.thread, **arguments)
            else:
                answer = await self._api("conversations.history", get=True, **arguments)
            for message in answer.get("messages") or []:
                if self._carries(message, key):
                    return str(message["ts"])
            cursor = str((answer.get("response_metadata") or {}).get("next_cursor") or "")
            if not cursor:
                return None
        log.warning("slack: a message's key was not found in the last %d pages; it is posted again", FIND_PAGES)
        return None

    def _carries(self, message: dict[str, Any], key: str) -> bool:
        metadata = message.get("metadata") or {}
        if metadata.get("event_type") != METADATA_EVENT or (metadata.get("event_payload") or {}).get("key") != key:
            return False
        mine = {self.identity.bot_id, self.identity.user_id} - {""}
        return not mine or bool({message.get("bot_id"), message.get("user")} & mine)

    # ------------------------------------------------------------------ in

    async def incoming(self) -> AsyncIterator[Incoming]:
        """What users do, in order; each is acknowledged to Slack once the runner has handled it."""
        while True:
            item = await self._queue.get()
            if item is None:
                return
            event, handled = item
            try:
                yield event
            finally:
                if not handled.done():
                    handled.set_result(None)

    async def _submit(self, event: Incoming) -> None:
        """Hand ``event`` to the runner and wait (at most :data:`ACK_WAIT` s) until it is handled."""
        handled: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((event, handled))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(ACK_WAIT):
                await asyncio.shield(handled)

    def register(self, app: AsyncApp) -> None:
        """Attach the adapter's listeners to the bolt ``app``."""
        app.event("app_mention")(self._on_mention)
        app.event("message")(self._on_message)
        app.event("assistant_thread_started")(self._on_assistant_thread)
        app.action(re.compile("^" + re.escape(BUTTON_PREFIX)))(self._on_button)
        app.command(SLASH_COMMAND)(self._on_command)

    async def _on_mention(self, event: dict[str, Any], body: dict[str, Any]) -> None:
        if event.get("bot_id"):
            return
        channel = str(event.get("channel") or "")
        thread = str(event.get("thread_ts") or event.get("ts") or "")
        if channel.startswith("D"):
            thread = str(event.get("thread_ts") or "")
        await self._message(event, body, thread, mention=True)

    async def _on_message(self, event: dict[str, Any], body: dict[str, Any]) -> None:
        if event.get("bot_id") or event.get("subtype") not in MESSAGE_SUBTYPES:
            return
        if event.get("channel_type") == "im":
            await self._message(event, body, str(event.get("thread_ts") or ""))
        elif event.get("channel_type") in CHANNEL_TYPES:
            await self._follow_up(event, body)

    async def _follow_up(self, event: dict[str, Any], body: dict[str, Any]) -> None:
        """A channel message: taken when it is in a thread the bot follows and does not mention the bot
        (a mention comes as ``app_mention`` too, with the same ``channel:ts``: taken there). Any other
        is left alone: no API call, nothing downloaded, nothing journaled."""
        channel, thread, user_id = (str(event.get(name) or "") for name in ("channel", "thread_ts", "user"))
        if self.follows is None or not channel or not thread or not user_id:
            return
        if self.identity.user_id and f"<@{self.identity.user_id}" in str(event.get("text") or ""):
            return
        team = str(event.get("team") or body.get("team_id") or self.identity.team_id)
        address = Address(channel=channel, workspace=team, thread=thread)
        conversation = self.follows.conversation(address, user_id)
        entering = self._entering.get(conversation)
        if entering is not None:  # the first mention's context is being read: this comes after it
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(ENTER_WAIT):
                    await entering.wait()
        if not self.follows.followed(conversation):
            return
        refused = self.access is not None and self.access.refusal(await self._user(user_id), address) is not None
        if refused and not await self.follows.first_refusal(conversation, user_id):
            return  # a stranger talking in the thread hears the refusal once
        await self._message(event, body, thread)

    async def _message(
        self, event: dict[str, Any], body: dict[str, Any], thread: str, *, mention: bool = False
    ) -> None:
        channel = str(event.get("channel") or "")
        user_id = str(event.get("user") or "")
        if not channel or not user_id:
            return
        team = str(event.get("team") or body.get("team_id") or self.identity.team_id)
        address = Address(channel=channel, workspace=team, thread=thread)
        self._last_thread[(channel, user_id)] = thread
        self._last_message[(channel, thread)] = str(event.get("ts") or "")
        # A first mention in a thread: a follow-up arriving meanwhile waits until it is handed on
        # (:meth:`_follow_up`), then is taken after it.
        entering = self._enter(address, user_id) if mention and thread and not channel.startswith("D") else None
        try:
            text = _unescape(_MENTION.sub("", str(event.get("text") or ""), count=1).strip())
            user = await self._user(user_id)
            allowed = self.access is None or self.access.refusal(user, address) is None
            attachments = (
                await self._images(address, event.get("files") or []) if allowed else ()
            )  # a stranger's: not fetched
            if allowed and thread and not channel.startswith("D") and not text.startswith("/"):
                text = await self._in_thread(address, user_id, str(event.get("ts") or ""), text, mention=mention)
        finally:
            if entering is not None:
                self._entered(*entering)
        message_id = f"{channel}:{event.get('ts') or ''}"
        await self._submit(IncomingMessage(address, user, text, attachments, message_id))

    def _enter(self, address: Address, user_id: str) -> tuple[str, asyncio.Event] | None:
        """Mark the thread's conversation as being entered (not followed yet, nobody entering it)."""
        if self.follows is None:
            return None
        conversation = self.follows.conversation(address, user_id)
        if self.follows.followed(conversation) or conversation in self._entering:
            return None
        entering = self._entering[conversation] = asyncio.Event()
        return conversation, entering

    def _entered(self, conversation: str, entering: asyncio.Event) -> None:
        """The mention is about to be handed on: follow-ups waiting for it go on (after it, in order)."""
        entering.set()
        if self._entering.get(conversation) is entering:
            del self._entering[conversation]

    async def _in_thread(self, address: Address, user_id: str, ts: str, text: str, *, mention: bool) -> str:
        """Follow the thread of an allowed user's message (durably, before it is handed on); the first
        mention in a thread with earlier messages gets them as context (:meth:`_earlier`)."""
        if self.follows is None:
            return text
        conversation = self.follows.conversation(address, user_id)
        first = not self.follows.followed(conversation)
        if mention and first and ts != address.thread and self.context.messages > 0:
            text = await self._with_earlier(address, ts, text)
        await self.follows.follow(conversation)
        return text

    async def _with_earlier(self, address: Address, ts: str, text: str) -> str:
        """``text`` with the thread's messages before ``ts`` as context; without, and one notice in the
        thread saying so, when Slack does not give them within :data:`CONTEXT_WAIT` seconds."""
        try:
            async with asyncio.timeout(CONTEXT_WAIT):
                earlier, omitted = await self._earlier(address, ts)
            return with_context(text, earlier, self.context, omitted)
        except (PlatformError, RateLimited, Unavailable, TimeoutError) as failed:
            if isinstance(failed, PlatformError) and failed.refusal is Refusal.FATAL:
                raise
            reason = "Slack took too long" if isinstance(failed, TimeoutError) else clip(str(failed), 160)
            log.warning("slack: a thread's earlier messages were not read (%s); the mention goes without", reason)
            await self._notice(
                address,
                f"the thread's earlier messages could not be read ({reason}); Codex got your message without them",
            )
            return text

    async def _earlier(self, address: Address, before: str) -> tuple[list[EarlierMessage], int]:
        """The thread's last ``context.messages`` messages before ``before`` (``conversations.replies``),
        oldest first, with their authors' names, and how many earlier ones are left out; at most
        :data:`CONTEXT_PAGES` pages are read (a longer thread: its first messages)."""
        found: list[dict[str, Any]] = []
        cursor = ""
        for _ in range(CONTEXT_PAGES):
            arguments: dict[str, Any] = {"channel": address.channel, "ts": address.thread, "limit": 200}
            arguments |= {"latest": before, "inclusive": False} | ({"cursor": cursor} if cursor else {})
            answer = await self._api("conversations.replies", get=True, **arguments)
            found += [m for m in answer.get("messages") or [] if isinstance(m, dict)]
            cursor = str((answer.get("response_metadata") or {}).get("next_cursor") or "")
            if not cursor:
                break
        mine = {self.identity.bot_id, self.identity.user_id} - {""}
        said = [m for m in found if str(m.get("text") or "").strip() and not _ts_order(m, before)]
        kept = said[-max(1, self.context.messages) :]
        earlier: list[EarlierMessage] = []
        for message in kept:
            text = _unescape(str(message.get("text") or "")).strip()
            if {message.get("bot_id"), message.get("user")} & mine:
                author = "Codex (this assistant)"
            elif message.get("user"):
                user_id = str(message["user"])
                name = await self._name(user_id)
                author = f"{name} ({user_id})" if name else user_id
            else:
                author = str(message.get("username") or message.get("bot_id") or "someone")
            earlier.append(EarlierMessage(author, text))
        return earlier, len(said) - len(kept)

    async def _on_assistant_thread(self, event: dict[str, Any]) -> None:
        """An AI app's assistant thread opened: offer :data:`SUGGESTED_PROMPTS` there. Refused (a
        workspace or app without the feature, ``assistant:write`` missing) or failed, it is logged
        once and the thread works without them."""
        thread = event.get("assistant_thread") or {}
        channel, ts = str(thread.get("channel_id") or ""), str(thread.get("thread_ts") or "")
        if not channel or not ts or self._no_prompts:
            return
        prompts = [{"title": title, "message": message} for title, message in SUGGESTED_PROMPTS]
        try:
            arguments: dict[str, Any] = {"channel_id": channel, "thread_ts": ts, "title": PROMPTS_TITLE}
            await self._api("assistant.threads.setSuggestedPrompts", prompts=prompts, **arguments)
        except PlatformError as refused:
            self._no_prompts = True
            self._warn_once("prompts", f"no suggested prompts ({refused}); assistant threads work without them")
        except (RateLimited, Unavailable) as failed:
            log.info("slack: suggested prompts not set in one assistant thread (%s)", failed)

    async def _on_button(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        try:
            container = body.get("container") or {}
            message = body.get("message") or {}
            channel = str(container.get("channel_id") or (body.get("channel") or {}).get("id") or "")
            thread = str(container.get("thread_ts") or message.get("thread_ts") or "")
            team = str((body.get("team") or {}).get("id") or self.identity.team_id)
            user = await self._user(str((body.get("user") or {}).get("id") or ""))
            for action in body.get("actions") or []:
                value = str(action.get("value") or "")
                menu_thread = str(action.get("action_id") or "").partition(THREAD_MARK)[2]
                thread = menu_thread or thread  # a button of the /codex menu names its thread
                if value and channel:
                    address = Address(channel=channel, workspace=team, thread=thread)
                    await self._submit(ButtonPress(address, user, value, str(container.get("message_ts") or "")))
        finally:
            await ack()

    async def _on_command(self, ack: AsyncAck, command: dict[str, Any]) -> None:
        channel = str(command.get("channel_id") or "")
        user_id = str(command.get("user_id") or "")
        line = str(command.get("text") or "").strip()
        if channel.startswith("D"):
            thread: str | None = self._last_thread.get((channel, user_id), "")
        else:
            thread = self._last_thread.get((channel, user_id))
        if thread is None:
            await ack(
                text=f"{SLASH_COMMAND} works in a thread you started with me here: mention me in that thread"
                f" with /{line.split(' ', 1)[0] or 'status'} (or press the buttons under my messages), or use"
                f" {SLASH_COMMAND} in a direct message"
            )
            return
        if not line:
            await ack(text="Codex in your last thread here", blocks=menu(thread))
            return
        try:
            team = str(command.get("team_id") or self.identity.team_id)
            user = await self._user(user_id)
            await self._submit(ButtonPress(Address(channel=channel, workspace=team, thread=thread), user, line))
        finally:
            await ack()

    async def _user(self, user_id: str) -> User:
        """``user_id`` with its display name and the allow-listed user groups it belongs to.

        The name is ``"<display name> (<id>)"``: anyone can set their display name, and the kit's
        allow-lists also match names, so a name must never be able to equal a listed id.
        """
        name = await self._name(user_id)
        return User(user_id, f"{name} ({user_id})" if name else "", await self._groups_of(user_id))

    async def _name(self, user_id: str) -> str:
        now = time.monotonic()
        cached = self._cache.names.get(user_id)
        if cached is not None and now - cached[0] < CACHE_SECONDS:
            return cached[1]
        name = ""
        try:
            answer = await self._api("users.info", get=True, user=user_id)
            info = answer.get("user") or {}
            profile = info.get("profile") or {}
            name = str(profile.get("display_name") or info.get("real_name") or info.get("name") or "")
        except (PlatformError, RateLimited, Unavailable) as exc:
            self._warn_once("users.info", f"user names are not shown ({exc}); the thoughts carry user ids")
        self._cache.names[user_id] = (now, clip(name, 80))
        return clip(name, 80)

    async def _groups_of(self, user_id: str) -> frozenset[str]:
        if not self.groups:
            return frozenset()
        now = time.monotonic()
        if now - self._cache.groups_at >= CACHE_SECONDS:
            members: dict[str, frozenset[str]] = {}
            for group in sorted(self.groups):
                try:
                    answer = await self._api("usergroups.users.list", get=True, usergroup=group)
                    members[group] = frozenset(str(u) for u in answer.get("users") or [])
                except (PlatformError, RateLimited, Unavailable) as exc:
                    self._warn_once(
                        "usergroups", f"user group members cannot be read ({exc}); add the usergroups:read scope"
                    )
                    members[group] = self._cache.groups.get(group, frozenset())
            self._cache.groups, self._cache.groups_at = members, now
        return frozenset(group for group, users in self._cache.groups.items() if user_id in users)

    def _warn_once(self, what: str, message: str) -> None:
        if what not in self._cache.warned:
            self._cache.warned.add(what)
            log.warning("slack: %s", message)

    async def _images(self, address: Address, files: list[dict[str, Any]]) -> tuple[Attachment, ...]:
        """The images among ``files``, downloaded with the bot token and stored; others are refused aloud."""
        stored: list[Attachment] = []
        for shared in files[:10]:
            name = clip(str(shared.get("name") or shared.get("id") or "file"), 80)
            if not str(shared.get("mimetype") or "").startswith("image/"):
                await self._notice(address, f"{name} is not an image; only images are passed to Codex")
                continue
            url = str(shared.get("url_private_download") or shared.get("url_private") or "")
            try:
                data = await self._files.fetch(url, {"Authorization": f"Bearer {self._token.reveal()}"})
                stored.append((await self.images.save(data)).attachment())
            except (UploadError, DownloadRefused) as exc:
                await self._notice(address, f"the image {name} was not passed to Codex: {exc}")
        return tuple(stored)

    async def _notice(self, address: Address, text: str) -> None:
        with contextlib.suppress(PlatformError, RateLimited, Unavailable):
            await self.post(address, Outgoing(self.dialect.plain(text), style="notice"), None)


def _ts_order(message: dict[str, Any], before: str) -> bool:
    """Whether ``message`` is not before the ``ts`` ``before`` (Slack's ``ts``: seconds and a counter)."""
    return _ts_key(str(message.get("ts") or "0")) >= _ts_key(before)


def _ts_key(ts: str) -> tuple[int, int]:
    seconds, _, fraction = ts.partition(".")
    try:
        return int(seconds or 0), int(fraction or 0)
    except ValueError:
        return (0, 0)


def _retry_after(headers: Any) -> float:
    value = None
    if headers is not None:
        value = headers.get("Retry-After") or headers.get("retry-after")
        if isinstance(value, list):
            value = value[0] if value else None
    try:
        return float(value) if value is not None else DEFAULT_RETRY_AFTER
    except ValueError:
        return DEFAULT_RETRY_AFTER


def _hint(error: str) -> str:
    hints = {
        "not_in_channel": "; invite the bot to the channel (/invite @Codex)",
        "channel_not_found": "; the channel is gone or the bot cannot see it",
        "missing_scope": "; add the scope to the app (examples/slack-manifest.yml lists them) and reinstall it",
        "invalid_auth": "; the bot token is wrong or revoked: copy it again from OAuth & Permissions",
        "not_authed": "; no bot token was sent",
        "token_revoked": "; the app was uninstalled or its token revoked: reinstall it",
        "account_inactive": "; the app was uninstalled or its token revoked: reinstall it",
    }
    return hints.get(error, "")


def _unescape(text: str) -> str:
    """Slack's entities back to characters (the user typed ``<``, not ``&lt;``)."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


@dataclass(frozen=True, slots=True)
class SlackRun:
    """What :func:`run_slack` needs: the section, its loaded tokens and the journal."""

    section: SlackSection
    secrets: dict[str, Secret]
    journal: JournalName


async def run_slack(settings: SlackRun, started: Callable[[SlackIdentity], Awaitable[None]] | None = None) -> None:
    """Run the Slack adapter until cancelled; :class:`PlatformError` when Slack refuses to start."""
    section, secrets = settings.section, settings.secrets
    token = secrets["token"]
    # No retry handlers: slack_sdk's default one posts again after a lost connection, which could
    # show a message twice; the platform retries itself, looking for the message first (post()).
    client = AsyncWebClient(token=token.reveal(), base_url=_api_url(section.api_url), retry_handlers=[])
    ledger = DeliveryLedger.open(ledger_path(local_base(settings.journal, state_root()), NAME))
    follows = FollowedThreads(ledger, section.channel_map())
    platform = SlackPlatform(
        client,
        token,
        ImageStore(uploads_dir(local_base(settings.journal, state_root()))),
        edit_interval=section.edit_interval,
        groups=frozenset(section.allow_groups),
        access=section.access_policy(),
        post_rate=section.post_rate,
        follows=follows,
        context=section.context_limits(),
    )
    try:
        identity = await platform.start()
    except BaseException:
        ledger.close()
        await platform.aclose()
        raise
    http = section.mode == "http"
    app = AsyncApp(
        client=client,
        token=token.reveal(),
        signing_secret=secrets["signing_secret"].reveal() if http else None,
        process_before_response=True,
        request_verification_enabled=http,
        logger=logging.getLogger("coven_codex.adapters.slack.bolt"),
    )
    platform.register(app)
    journal = open_journal(settings.journal)
    runner = AdapterRunner(
        journal,
        platform,
        section.channel_map(),
        section.access_policy(),
        ledger,
        name=NAME,
        options=section.runner_options(),
        metrics=section.metrics,
        follows=follows,
    )
    try:
        async with contextlib.AsyncExitStack() as stack:
            if http:
                await _serve_http(stack, app, section)
            else:
                await _connect_socket_mode(stack, app, client, secrets["app_token"])
            log.info("slack: connected as %s in %s (%s mode)", identity.user_id, identity.team_id, section.mode)

            async def announce() -> None:
                """Tell ``started`` once the runner follows the journal."""
                await runner.ready.wait()
                if started is not None:
                    await started(identity)

            announcer = asyncio.create_task(announce())
            try:
                await runner.run()
            finally:
                announcer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await announcer
    finally:
        await platform.aclose()
        ledger.close()
        await journal.aclose()


def _api_url(url: str | None) -> str:
    if not url:
        return AsyncWebClient.BASE_URL
    return url if url.endswith("/") else url + "/"


async def _connect_socket_mode(
    stack: contextlib.AsyncExitStack, app: AsyncApp, client: AsyncWebClient, app_token: Secret
) -> None:
    from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler  # noqa: PLC0415

    handler = AsyncSocketModeHandler(app, app_token.reveal(), web_client=client)
    # The first address is asked for here: slack_sdk's connect loop retries every error for ever
    # (a wrong app-level token would hang the adapter); a refusal is said once and ends the adapter.
    try:
        opened = await client.apps_connections_open(app_token=app_token.reveal())
        handler.client.wss_uri = str(opened["url"])
    except SlackApiError as exc:
        response = exc.response
        status = int(getattr(response, "status_code", None) or getattr(response, "status", 0) or 0)
        data = response.data if isinstance(response, AsyncSlackResponse) else None
        error = str((data.get("error") if isinstance(data, dict) else None) or "refused")
        if isinstance(classify("apps.connections.open", status, error, 0.0), (RateLimited, Unavailable)):
            log.warning(
                "slack: Slack failed apps.connections.open (HTTP %d, %s); Socket Mode keeps trying", status, error
            )
        else:
            raise PlatformError(
                f"Slack refused Socket Mode ({clip(error, 80)}): check SLACK_APP_TOKEN (Basic Information >"
                " App-Level Tokens, scope connections:write) and that Socket Mode is enabled for the app"
            ) from None
    except (aiohttp.ClientError, TimeoutError) as exc:
        log.warning("slack: cannot reach Slack yet (%s); Socket Mode keeps trying", type(exc).__name__)
    await handler.connect_async()  # type: ignore[no-untyped-call]
    stack.push_async_callback(handler.close_async)


async def _serve_http(stack: contextlib.AsyncExitStack, app: AsyncApp, section: SlackSection) -> None:
    from aiohttp import web  # noqa: PLC0415

    runner = web.AppRunner(app.web_app(path="/slack/events", port=section.http_port))
    await runner.setup()
    stack.push_async_callback(runner.cleanup)
    site = web.TCPSite(runner, section.http_host, section.http_port)
    try:
        await site.start()
    except OSError as exc:
        raise PlatformError(
            f"cannot listen on {section.http_host}:{section.http_port}: {exc.strerror}; choose another http_port"
        ) from None
    log.info("slack: HTTP events at http://%s:%d/slack/events", section.http_host, section.http_port)
