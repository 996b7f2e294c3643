"""Signed timestamps: a delivery in the Standard Webhooks form is verified by the
``standardwebhooks`` library, and one replayed later (an old timestamp) or with its timestamp
changed is refused by it; today's header is still sent for existing receivers (issue 31, item 6)."""

from __future__ import annotations

import hashlib
import hmac
import time
from pathlib import Path

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError
from webhook_journal import SECRET, sending, target, turn, until_saved

from coven_codex.journal import FileJournal
from coven_codex.support.secret import Secret
from coven_codex.testing.webhook_receiver import Received, WebhookReceiver
from coven_codex.webhooks.payload import JSON_TYPE, request_headers


async def delivered_once(tmp_path: Path, **fields: object) -> Received:
    path = tmp_path / "journal.jsonl"
    journal = FileJournal(path, durability="never")
    last = await turn(journal, "red", 0)
    async with WebhookReceiver(SECRET.encode()) as receiver, sending(path, target(receiver.url, **fields)):
        await receiver.wait_until(lambda r: len(r.acknowledged) >= 1, timeout=60)
        await until_saved(journal, last)
    await journal.aclose()
    (request,) = receiver.received
    return request


async def test_a_standard_webhooks_delivery_is_verified_by_the_library_and_keeps_todays_header(
    tmp_path: Path,
) -> None:
    request = await delivered_once(tmp_path, standard_webhooks=True)
    payload = Webhook(SECRET.encode()).verify(request.body, request.headers)
    assert payload["entry-id"] == request.headers["webhook-id"] == request.key
    assert request.signature_ok  # X-Coven-Signature-256, as before
    # The timed form of today's header: the timestamp is signed with the body.
    stamp = request.headers["x-coven-timestamp"]
    assert stamp == request.headers["webhook-timestamp"] and abs(int(stamp) - time.time()) < 300
    signed = stamp.encode() + b"." + request.body
    expected = "sha256=" + hmac.new(SECRET.encode(), signed, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(request.headers["x-coven-signature-timed"], expected)


async def test_without_the_option_only_the_coven_headers_are_sent(tmp_path: Path) -> None:
    request = await delivered_once(tmp_path)
    assert request.signature_ok and "x-coven-signature-timed" in request.headers
    assert not [name for name in request.headers if name.startswith("webhook-")]


def test_a_replayed_delivery_is_refused_by_the_library() -> None:
    body = b'{"type":"agent-turn-complete"}'
    now = int(time.time())
    fresh = dict(request_headers(Secret(SECRET), body, JSON_TYPE, "th:turn-0:end", 1, timestamp=now, standard=True))
    Webhook(SECRET.encode()).verify(body, fresh)
    # The same request captured and sent again ten minutes later: its signed timestamp is too old.
    old = dict(request_headers(Secret(SECRET), body, JSON_TYPE, "th:turn-0:end", 1, timestamp=now - 600, standard=True))
    with pytest.raises(WebhookVerificationError, match="too old"):
        Webhook(SECRET.encode()).verify(body, old)
    # ... and with a fresh timestamp put in its place, the signature no longer matches.
    with pytest.raises(WebhookVerificationError, match="No matching signature"):
        Webhook(SECRET.encode()).verify(body, {**old, "webhook-timestamp": str(now)})
