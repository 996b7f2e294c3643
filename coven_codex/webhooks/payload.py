"""What a webhook sends (docs/webhooks.md): the payload, its CloudEvent form, the request's headers.

The payload carries the fields of Codex's own ``agent-turn-complete`` notification (what Codex
passes to its ``notify`` program: ``type``, ``thread-id``, ``turn-id``, ``cwd``, ``client``,
``input-messages``, ``last-assistant-message``) and ours, in the same kebab-case. The body is
serialised once per turn end; the signature is the HMAC-SHA256 of exactly those bytes.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from datetime import datetime
from typing import Literal
from urllib.parse import quote

from pydantic import AliasChoices, AliasGenerator, BaseModel, ConfigDict

from coven_codex import __version__
from coven_codex.entries import TokenUsage
from coven_codex.support.secret import Secret

EVENT_TYPE = "agent-turn-complete"
CLIENT = "coven-codex"
CLOUDEVENT_TYPE = "coven-codex.agent-turn-complete"
CLOUDEVENT_SOURCE = "coven-codex"
SIGNATURE_HEADER = "X-Coven-Signature-256"
"""``sha256=<hex HMAC-SHA256 of the body with the shared secret>``."""
IDEMPOTENCY_HEADER = "Idempotency-Key"
"""The turn end's entry id: the same on every attempt and after a restart."""
EVENT_HEADER = "X-Coven-Event"
TIMESTAMP_HEADER = "X-Coven-Timestamp"
"""When this attempt was signed: Unix seconds (a retry is signed anew)."""
TIMED_SIGNATURE_HEADER = "X-Coven-Signature-Timed"
"""``sha256=<hex HMAC-SHA256 of "<timestamp>." followed by the body>``: the timestamp is signed, so a
receiver that refuses old timestamps refuses replays."""
STANDARD_ID_HEADER = "webhook-id"
STANDARD_TIMESTAMP_HEADER = "webhook-timestamp"
STANDARD_SIGNATURE_HEADER = "webhook-signature"
"""Standard Webhooks (standardwebhooks.com): ``v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">``,
keyed with the shared secret's UTF-8 bytes; on when the target sets ``standard_webhooks``."""
ATTEMPT_HEADER = "X-Coven-Attempt"
"""1 for a turn's first attempt by this sender process, then 2, 3, ... (not part of the signed body)."""
JSON_TYPE = "application/json"
CLOUDEVENTS_TYPE = "application/cloudevents+json; charset=utf-8"

TurnStatus = Literal["completed", "failed", "aborted"]
"""``turn_completed`` → ``completed``, ``turn_failed`` → ``failed``, ``turn_aborted`` → ``aborted``."""


class TurnError(BaseModel):
    """The classified error of a failed turn (its ``error`` entry)."""

    code: str
    message: str
    hint: str


def _kebab(name: str) -> str:
    return name.replace("_", "-")


class TurnCompletePayload(BaseModel):
    """The body of one webhook request: a turn ended (docs/webhooks.md, The payload). Fields are
    kebab-case in JSON, like Codex's own notification; either spelling is read."""

    model_config = ConfigDict(
        alias_generator=AliasGenerator(
            validation_alias=lambda name: AliasChoices(_kebab(name), name), serialization_alias=_kebab
        ),
        populate_by_name=True,
    )

    type: Literal["agent-turn-complete"] = "agent-turn-complete"
    thread_id: str | None
    turn_id: str | None
    cwd: str | None
    client: str = CLIENT
    input_messages: list[str]
    """The thoughts the turn answered, oldest first (at most the newest 8, each cut to 4096 characters)."""
    last_assistant_message: str | None
    conversation: str
    status: TurnStatus
    error: TurnError | None
    usage: TokenUsage | None
    duration_seconds: float | None
    """From the turn's ``turn_started`` to its end; null when the start was not seen."""
    ended_at: datetime
    entry_id: str
    idempotency_key: str
    """The same as ``entry-id``, and as the ``Idempotency-Key`` header."""
    in_reply_to: str | None
    truncated: bool
    """Something was left out or cut (older input messages, long texts, a context forgotten)."""

    def body(self) -> bytes:
        """This payload as compact UTF-8 JSON: the exact bytes that are signed and sent."""
        return _dumps(self.model_dump(mode="json", by_alias=True))


class CloudEvent(BaseModel):
    """A CloudEvents 1.0 event in structured mode, the payload as its ``data``."""

    model_config = ConfigDict(populate_by_name=True)

    specversion: Literal["1.0"] = "1.0"
    type: str = CLOUDEVENT_TYPE
    source: str = CLOUDEVENT_SOURCE
    id: str
    time: datetime
    subject: str
    datacontenttype: Literal["application/json"] = "application/json"
    data: TurnCompletePayload

    def body(self) -> bytes:
        """The event as compact UTF-8 JSON (``data`` in the payload's own kebab-case)."""
        return _dumps(self.model_dump(mode="json", by_alias=True))


def _dumps(data: object) -> bytes:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def encode(payload: TurnCompletePayload, fmt: Literal["json", "cloudevents"]) -> tuple[bytes, str]:
    """The body and its content type for a target's ``format``."""
    if fmt == "cloudevents":
        event = CloudEvent(id=payload.entry_id, time=payload.ended_at, subject=payload.conversation, data=payload)
        return event.body(), CLOUDEVENTS_TYPE
    return payload.body(), JSON_TYPE


def signature(secret: Secret, body: bytes) -> str:
    """The signature header's value: ``sha256=`` and the hex HMAC-SHA256 of ``body`` keyed with ``secret``."""
    return "sha256=" + hmac.new(secret.reveal().encode("utf-8"), body, hashlib.sha256).hexdigest()


def verify(secret: bytes, body: bytes, header: str) -> bool:
    """What a receiver does: is ``header`` the signature of ``body`` with ``secret``? (constant time)."""
    expected = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode("ascii"), header.strip().encode("ascii", "replace"))


_HEADER_SAFE = re.compile(r"[\x21-\x7e]{1,1024}")


def header_key(key: str) -> str:
    """``key`` as a header value: as it is when it is printable ASCII without spaces, else percent-encoded."""
    return key if _HEADER_SAFE.fullmatch(key) else quote(key, safe="")[:4096]


def timed_signature(secret: Secret, body: bytes, timestamp: int) -> str:
    """:data:`TIMED_SIGNATURE_HEADER`'s value: ``sha256=`` and the hex HMAC-SHA256 of ``"<timestamp>." + body``."""
    signed = f"{timestamp}.".encode("ascii") + body
    return "sha256=" + hmac.new(secret.reveal().encode("utf-8"), signed, hashlib.sha256).hexdigest()


def standard_signature(secret: Secret, message_id: str, body: bytes, timestamp: int) -> str:
    """:data:`STANDARD_SIGNATURE_HEADER`'s value: ``v1,`` and the base64 HMAC-SHA256 of
    ``"<id>.<timestamp>.<body>"``."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret.reveal().encode("utf-8"), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def request_headers(
    secret: Secret,
    body: bytes,
    content_type: str,
    key: str,
    attempt: int,
    *,
    timestamp: int,
    standard: bool = False,
) -> list[tuple[str, str]]:
    """The headers of one attempt signed at ``timestamp`` (Unix seconds): content type, the signatures
    (the body's, the timed one, with ``standard`` the Standard Webhooks ones), idempotency key, event,
    attempt, user agent."""
    message_id = header_key(key)
    headers = [
        ("Content-Type", content_type),
        (SIGNATURE_HEADER, signature(secret, body)),
        (TIMESTAMP_HEADER, str(timestamp)),
        (TIMED_SIGNATURE_HEADER, timed_signature(secret, body, timestamp)),
        (IDEMPOTENCY_HEADER, message_id),
        (EVENT_HEADER, EVENT_TYPE),
        (ATTEMPT_HEADER, str(attempt)),
        ("User-Agent", f"coven-codex/{__version__}"),
    ]
    if standard:
        headers += [
            (STANDARD_ID_HEADER, message_id),
            (STANDARD_TIMESTAMP_HEADER, str(timestamp)),
            (STANDARD_SIGNATURE_HEADER, standard_signature(secret, message_id, body, timestamp)),
        ]
    return headers
