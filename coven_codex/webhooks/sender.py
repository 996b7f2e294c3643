"""The webhook sender: a journal consumer per target, with saved cursors (docs/webhooks.md).

For each target one task reads the journal (through the :class:`~coven_codex.journal.Journal`
protocol only) and turns every turn end into a payload (:class:`~coven_codex.webhooks.turns.TurnTracker`),
and one task delivers them, one at a time in journal order (so in order per conversation),
through a bounded queue: a slow or dead receiver holds back only its own reader, never the
daemon.

**Delivery.** An attempt is one POST bounded by the target's ``timeout``. 2xx: delivered. A
network error, a timeout, 408, 429 or 5xx: retried after a wait drawn with full jitter from
the doubling backoff (1 s, 2 s, 4 s, ... at most ``max_delay``), and at least what a
``Retry-After`` asks (seconds or an HTTP date; at most ``max_delay`` all the same), for as long
as the target fails; the turns behind it wait. Any other status (a 4xx, a redirect): not retried; one ``error`` entry
``WEBHOOK_REJECTED`` in the turn's conversation says so, and the sender goes on. A target that
keeps failing is logged once (then a summary every five minutes) and reported once per outage
in the chat (``WEBHOOK_FAILING``, after :data:`REPORT_AFTER_FAILURES` failures in a row).

**Cursors.** ``webhook <name>`` is the end of the last turn end that was delivered (or
rejected and reported); ``webhook <name> context`` is where to read again so that the memory
of the turns still open is rebuilt (:meth:`TurnTracker.low_water`). Both are saved only after
the receiver acknowledged a turn, the second one first. After a crash the reader starts at the
second (at the first when that is older); turn ends up to the first are taken as delivered, so
at most the turn whose delivery was under way is sent again, with the same idempotency key.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx

from coven_codex.codex.errors import shorten
from coven_codex.entries import ErrorEntry
from coven_codex.journal import (
    BadLine,
    CursorMismatch,
    FileJournal,
    Journal,
    JournalRecord,
    JournalReplaced,
    Position,
)
from coven_codex.journal.redis.errors import JournalLost, RedisMisconfigured
from coven_codex.support.backoff import RepeatFilter, backoff, full_jitter
from coven_codex.support.limits import cut
from coven_codex.support.statelock import DaemonLock
from coven_codex.webhooks.config import ReadyTarget
from coven_codex.webhooks.http import DeliveryError, HttpResponse, open_client, post
from coven_codex.webhooks.payload import TurnCompletePayload, encode, request_headers
from coven_codex.webhooks.turns import WEBHOOK_CODE_PREFIX, TurnTracker

log = logging.getLogger(__name__)

QUEUE_SIZE = 16
"""Turn ends read ahead of the delivery, at most; then the reader waits."""
RETRY_BASE = 1.0
"""The first retry waits up to this many seconds (full jitter); each failure doubles it, up to ``max_delay``."""
RESTART_BASE = 1.0
"""A sender that failed (journal unreadable, cursor unsavable) starts again after this, doubling to 60 s."""
REPORT_AFTER_FAILURES = 3
"""A target's outage reaches the chat once it failed this many attempts in a row."""
RETRYABLE_4XX = frozenset({408, 429})
FATAL = (JournalLost, RedisMisconfigured)
"""Failures a restart of the sender does not fix (a Redis that lost the journal, or refuses us):
:meth:`TargetSender.run` raises them."""
REJECTED_CODE = f"{WEBHOOK_CODE_PREFIX}REJECTED"
FAILING_CODE = f"{WEBHOOK_CODE_PREFIX}FAILING"


def cursor_names(name: str) -> tuple[str, str]:
    """The two cursors of target ``name``: delivered-through, and where its memory is read again from."""
    return f"webhook {name}", f"webhook {name} context"


def report_id(kind: str, name: str, entry_id: str) -> str:
    """The id of a report (``rejected`` or ``failing``) about the turn end ``entry_id``: the same after a restart."""
    return f"webhook-{kind}:{name}:{entry_id}"


def retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (delay-seconds or an HTTP date), ``None`` if unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(int(value))
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - (now or datetime.now(UTC))).total_seconds(), 0.0)


def retry_wait(failures: int, asked: float | None, max_delay: float) -> float:
    """The wait after ``failures`` failed attempts in a row: full jitter below the doubling backoff, at
    least what ``Retry-After`` asked (``asked``; a 0 does not make it hurry), never over ``max_delay``."""
    wait = full_jitter(RETRY_BASE, failures, cap=max_delay)
    return wait if asked is None else min(max(wait, asked), max_delay)


@dataclass(frozen=True, slots=True)
class Delivery:
    """One turn end to send: its payload, the exact body, and the positions to save once it is acknowledged."""

    payload: TurnCompletePayload
    body: bytes
    content_type: str
    end: Position
    """Just after the turn end's record: the delivered-through cursor."""
    low_water: Position
    """Where to read again from to rebuild the memory of the turns still open: the context cursor."""


@dataclass(frozen=True, slots=True)
class Rejected:
    """The receiver refused a delivery for good (a status that is not retried)."""

    status: int
    detail: str


@dataclass(frozen=True, slots=True)
class Failure:
    """One attempt that failed in a way worth retrying."""

    problem: str
    wait_asked: float | None


class TargetSender:
    """Sends every turn end of ``journal`` to one target; see the module docstring. :meth:`run` never
    returns (cancel it to stop); failures of its own are logged and it starts again."""

    def __init__(
        self,
        journal: Journal,
        target: ReadyTarget,
        *,
        default_cwd: str | None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.journal = journal
        self.target = target
        self.name = target.name
        self.default_cwd = default_cwd
        self.ssl_context = ssl_context
        self.cursor, self.context_cursor = cursor_names(self.name)
        self.host = (target.url.hostname or "")[:60]
        self._failures = 0
        self._failing_since: float | None = None
        self._outage_reported = False
        self._failing_log = RepeatFilter()
        self._rejected_log = RepeatFilter()
        self._known_reports: set[str] = set()
        self._saved_context: Position | None = None
        self._client: httpx.AsyncClient | None = None

    # -- the loop ---------------------------------------------------------------------------------
    async def run(self) -> None:
        """Deliver forever; a failure of the sender itself is logged (once while it repeats) and it starts
        again after a backoff, from its saved cursors; one that a restart does not fix (:data:`FATAL`) is raised."""
        repeats = RepeatFilter()
        failures = 0
        while True:
            try:
                await self._run_once()
            except JournalReplaced:
                log.info("webhook %s: the journal was replaced; reading it again from its saved cursor", self.name)
                continue
            except FATAL:  # (starting again would fail the same way: the process must stop, saying why)
                raise
            except Exception as exc:
                failures += 1
                summary = repeats.note(type(exc).__name__ + str(exc)[:200])
                if summary is not None:
                    log.error(
                        "webhook %s stopped (%s: %s)%s; it starts again from its saved cursor after a backoff",
                        self.name,
                        type(exc).__name__,
                        shorten(str(exc), 300),
                        f" {summary}" if summary else "",
                    )
                await asyncio.sleep(backoff(RESTART_BASE, failures))

    async def _run_once(self) -> None:
        async with AsyncExitStack() as stack:
            self._client = open_client(timeout=self.target.target.timeout, ssl_context=self.ssl_context)
            stack.push_async_callback(self._client.aclose)
            await self._run_with_client()

    async def _run_with_client(self) -> None:
        delivered, context_from = await self._load_cursors()
        if delivered is not None:
            self._known_reports = await self._reports_after(delivered)
        tracker = TurnTracker(self.default_cwd)
        queue: asyncio.Queue[Delivery] = asyncio.Queue(maxsize=QUEUE_SIZE)
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self._read(tracker, queue, context_from, delivered), name=f"webhook {self.name} read")
                group.create_task(self._deliver_all(queue), name=f"webhook {self.name} send")
        except BaseExceptionGroup as group_error:
            raise _first(group_error) from None

    async def _load_cursors(self) -> tuple[Position | None, Position | None]:
        """(delivered-through, read-from), ``None`` for "nothing yet"; sets them at the journal's end on
        the first run of a target that starts at the end."""
        try:
            delivered = await self.journal.load_cursor(self.cursor)
            context_from = await self.journal.load_cursor(self.context_cursor)
        except CursorMismatch as exc:
            log.error(
                "webhook %s: %s. The turns after its cursor in the old file are not sent; sending every turn of"
                " the new file",
                self.name,
                exc,
            )
            return None, None
        if delivered is None and self.target.target.start == "end":
            delivered = context_from = await self.journal.end_position()
            await self.journal.save_cursor(self.cursor, delivered)
            await self.journal.save_cursor(self.context_cursor, context_from)
            log.info("webhook %s: first run, sending the turns that end from now on", self.name)
        elif context_from is None or (delivered is not None and delivered < context_from):
            context_from = delivered
        self._saved_context = context_from
        return delivered, context_from

    async def _reports_after(self, delivered: Position) -> set[str]:
        """The ids of this target's reports written after ``delivered`` (so a restart does not repeat them)."""
        prefixes = (report_id("rejected", self.name, ""), report_id("failing", self.name, ""))
        return {
            item.entry.id
            for item in await self.journal.read(delivered)
            if isinstance(item, JournalRecord) and item.entry.id is not None and item.entry.id.startswith(prefixes)
        }

    async def _read(
        self,
        tracker: TurnTracker,
        queue: asyncio.Queue[Delivery],
        start: Position | None,
        delivered: Position | None,
    ) -> None:
        items = self.journal.tail(start) if start is not None else self.journal.tail()
        async for item in items:
            if isinstance(item, BadLine):
                continue
            payload = tracker.absorb(item)
            if payload is None or (delivered is not None and item.end <= delivered):
                continue  # no turn end, or one delivered before a restart (its memory is let go all the same)
            body, content_type = encode(payload, self.target.target.format)
            await queue.put(Delivery(payload, body, content_type, item.end, tracker.low_water(item.end)))

    async def _deliver_all(self, queue: asyncio.Queue[Delivery]) -> None:
        while True:
            delivery = await queue.get()
            outcome = await self.deliver(delivery)
            if isinstance(outcome, Rejected):
                await self._report_rejection(delivery, outcome)
            # (The context first: stopped between the two saves, a sender must not find a delivered-through
            # cursor without a context cursor, which it would then take to be the same: the memory of the
            # turns still open would be lost. The other way round it reads from the older of the two.)
            if delivery.low_water != self._saved_context:
                await self.journal.save_cursor(self.context_cursor, delivery.low_water)
                self._saved_context = delivery.low_water
            await self.journal.save_cursor(self.cursor, delivery.end)

    # -- one delivery -----------------------------------------------------------------------------
    async def deliver(self, delivery: Delivery) -> Rejected | None:
        """Send ``delivery`` until the receiver acknowledges it (``None``) or refuses it for good."""
        attempt = 0
        while True:
            attempt += 1
            outcome = await self._attempt(delivery, attempt)
            if outcome is None or isinstance(outcome, Rejected):
                self._recovered()
                return outcome
            await self._failed(delivery, outcome)
            await asyncio.sleep(retry_wait(self._failures, outcome.wait_asked, self.target.target.max_delay))

    async def _attempt(self, delivery: Delivery, attempt: int) -> Rejected | Failure | None:
        key = delivery.payload.idempotency_key
        headers = request_headers(
            self.target.secret,
            delivery.body,
            delivery.content_type,
            key,
            attempt,
            timestamp=int(time.time()),
            standard=self.target.target.standard_webhooks,
        )
        client = self._client
        if client is None:  # (deliver() called outside run(): a client for this one delivery)
            async with open_client(timeout=self.target.target.timeout, ssl_context=self.ssl_context) as own:
                return await self._post(own, delivery, headers)
        return await self._post(client, delivery, headers)

    async def _post(
        self, client: httpx.AsyncClient, delivery: Delivery, headers: list[tuple[str, str]]
    ) -> Rejected | Failure | None:
        timeout = self.target.target.timeout
        try:
            async with asyncio.timeout(timeout):
                response = await post(client, self.target.url.geturl(), delivery.body, headers)
        except (TimeoutError, httpx.TimeoutException):
            return Failure(f"no answer within {timeout:g} s", None)
        except (DeliveryError, OSError) as exc:
            return Failure(f"{type(exc).__name__}: {shorten(str(exc) or 'connection failed', 120)}", None)
        return self._judge(response)

    def _judge(self, response: HttpResponse) -> Rejected | Failure | None:
        status = response.status
        if 200 <= status < 300:
            return None
        if status >= 500 or status in RETRYABLE_4XX:
            return Failure(f"HTTP {status}", retry_after(response.headers.get("retry-after")))
        detail = response.body[:200].decode("utf-8", "replace").strip()
        if 300 <= status < 400:
            detail = f"redirect to {response.headers.get('location', '?')[:120]}; redirects are not followed"
        return Rejected(status, " ".join(detail.split())[:120])

    # -- reports ----------------------------------------------------------------------------------
    async def _failed(self, delivery: Delivery, failure: Failure) -> None:
        self._failures += 1
        if self._failing_since is None:
            self._failing_since = time.monotonic()
        summary = self._failing_log.note("failing")
        if summary is not None:
            log.warning(
                "webhook %s (%s) failed: %s; retrying with backoff (at most %g s apart), the turns behind it wait%s",
                self.name,
                self.host,
                failure.problem,
                self.target.target.max_delay,
                f" {summary}" if summary else "",
            )
        if self._failures >= REPORT_AFTER_FAILURES and not self._outage_reported:
            self._outage_reported = True
            payload = delivery.payload
            await self._report(
                report_id("failing", self.name, payload.entry_id),
                payload,
                FAILING_CODE,
                f"the webhook {self.name} ({self.host}) failed {self._failures} times in a row (last:"
                f" {failure.problem}); this turn's notification and those after it are retried until it answers",
                f"Check that the receiver at {self.host} is up and answers 2xx. Nothing is lost: every turn is sent"
                " once it does (docs/webhooks.md).",
            )

    def _recovered(self) -> None:
        if self._failing_since is not None:
            log.info(
                "webhook %s (%s) answers again after %d failed attempt(s) over %.0f s",
                self.name,
                self.host,
                self._failures,
                time.monotonic() - self._failing_since,
            )
        self._failures, self._failing_since, self._outage_reported = 0, None, False
        self._failing_log.clear()

    async def _report_rejection(self, delivery: Delivery, rejected: Rejected) -> None:
        payload = delivery.payload
        if self._rejected_log.note(str(rejected.status)) is not None:
            log.warning(
                "webhook %s (%s) refused the turn end %s with HTTP %d (%s); not sent again",
                self.name,
                self.host,
                cut(payload.entry_id),
                rejected.status,
                cut(rejected.detail, 120),
            )
        detail = f" ({rejected.detail})" if rejected.detail else ""
        await self._report(
            report_id("rejected", self.name, payload.entry_id),
            payload,
            REJECTED_CODE,
            f"the webhook {self.name} ({self.host}) refused this turn's notification with HTTP {rejected.status}"
            f"{detail}; it is not sent again",
            "A 4xx (or a redirect) means the receiver refused the request itself: fix the receiver, or the"
            " webhook's url in coven.toml (docs/webhooks.md).",
        )

    async def _report(self, entry_id: str, payload: TurnCompletePayload, code: str, text: str, hint: str) -> None:
        if entry_id in self._known_reports:
            return
        self._known_reports.add(entry_id)
        entry = ErrorEntry(
            id=entry_id,
            conversation=payload.conversation,
            code=code,
            text=shorten(text),
            hint=hint,
            in_reply_to=payload.in_reply_to,
        )
        await self.journal.append(entry)


def _first(error: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups."""
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


def target_lock(journal: Journal, name: str) -> DaemonLock | None:
    """One sender per target on a file journal (two would send every turn twice): a lock beside its cursors."""
    if not isinstance(journal, FileJournal):
        return None
    path = journal.daemon_lock_path().parent / f"webhook-{name}.lock"
    return DaemonLock(
        path,
        lambda pid: (
            f"another webhook sender (pid {pid}) is sending to the webhook {name} of the journal {journal.path};"
            " two would send every turn twice. Stop it (or leave [webhooks] in_daemon off while `coven-codex"
            " webhooks` runs)"
        ),
    )
