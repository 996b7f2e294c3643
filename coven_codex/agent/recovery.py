"""After a crash: did Codex receive the thought that was in flight?

Codex's rollout is the record of what it received, so it decides:

- app-server: ``turn/start`` carried ``clientUserMessageId = <thought id>`` and Codex
  records it as ``client_id`` on the ``UserMessage`` item of an ``event_msg``/``item_completed``
  line (0.160, 0.169), or on the ``event_msg``/``user_message`` line (0.140, 0.147); the thought
  was received iff that line exists, or iff the model history ends with the
  thought's text (its digest, as the record keeps it) and no such item followed it (a process
  killed between the two records, below);
- exec (no client id; 0.47 records only the text): the thread had received
  ``ordinal`` of our thoughts before this one; it was received iff the rollout holds
  more user messages than that. Codex writes each user message twice: first into the model
  history (``response_item``, ``role: user``), a moment later as an event (``event_msg``
  ``user_message`` on 0.47, ``item_completed`` on 0.169). A process killed in between has put
  the thought into the thread's history, which a resumed thread sends to the model, without the
  event; so the larger of the two counts decides (messages Codex injects itself, such as the
  environment context, are not counted: :mod:`coven_codex.rollout.injected`);
- exec's first thought of a conversation: the thread id was not known yet, so we look for an
  unclaimed rollout in ``$CODEX_HOME/sessions`` whose first user message is the thought's text
  (by its digest).

Only call this once no Codex process of the previous run is alive (see
:mod:`coven_codex.agent.processes`), so the rollout no longer changes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coven_codex.agent.state import ThoughtRecord, text_digest
from coven_codex.entries import StatusEntry
from coven_codex.rollout import TURN_END_STATES, TURN_STARTED, RolloutTranslator
from coven_codex.rollout.injected import is_injected
from coven_codex.rollout.locator import thread_id_from_path
from coven_codex.tailing import LineSplitter

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class UserMessages:
    """The user messages of a rollout, in both forms Codex records them."""

    client_ids: list[str | None]
    """From the event form: each message's client id (``item_completed`` on 0.160 and 0.169,
    ``user_message`` on 0.140 and 0.147), else ``None``."""
    texts: list[str]
    """The event form: ``event_msg`` ``item_completed`` (0.169) or ``user_message`` (0.47)."""
    history: list[str]
    """The model-history form: ``response_item`` messages with ``role: user``, injected ones left out."""

    @property
    def count(self) -> int:
        """How many messages the thread received: a torn write may have left only the history form."""
        return max(len(self.texts), len(self.history))

    @property
    def first(self) -> str | None:
        """The thread's first user message (the history form is written first)."""
        for texts in (self.history, self.texts):
            if texts:
                return texts[0]
        return None


def _records(path: Path) -> Iterator[dict[str, Any]]:
    try:
        raw = path.read_bytes()
    except OSError:
        return
    for line in raw.split(b"\n"):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        if isinstance(record, dict):
            yield record


def user_messages(path: Path) -> UserMessages:
    """The user messages a rollout records, from whichever form the version writes."""
    item_ids: list[str | None] = []
    item_texts: list[str] = []
    event_ids: list[str | None] = []
    event_texts: list[str] = []
    history: list[str] = []
    for record in _records(path):
        payload = record.get("payload")
        if not isinstance(payload, dict):
            continue
        kind = payload.get("type")
        if record.get("type") == "response_item":
            if kind == "message" and payload.get("role") == "user":
                text = _content_text(payload.get("content"))
                if not is_injected(text):
                    history.append(text)
            continue
        if record.get("type") != "event_msg":
            continue
        if kind == "user_message":
            event_texts.append(str(payload.get("message", "")))
            client_id = payload.get("client_id")
            event_ids.append(client_id if isinstance(client_id, str) else None)
        elif kind == "item_completed":
            item = payload.get("item")
            if isinstance(item, dict) and item.get("type") == "UserMessage":
                client_id = item.get("client_id")
                item_ids.append(client_id if isinstance(client_id, str) else None)
                item_texts.append(_content_text(item.get("content")))
    if len(item_texts) >= len(event_texts):
        return UserMessages(item_ids, item_texts, history)
    return UserMessages(event_ids, event_texts, history)


def _content_text(content: Any) -> str:
    if not isinstance(content, list):
        return ""
    return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))


def recorded_client_id(line: bytes) -> str | None:
    """The ``client_id`` of a rollout line recording a user message (0.169: ``item_completed``
    with a ``UserMessage``, as 0.160; 0.140 and 0.147: ``user_message``), else ``None``."""
    try:
        record = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    payload = record.get("payload") if isinstance(record, dict) else None
    if record.get("type") != "event_msg" or not isinstance(payload, dict):
        return None
    if payload.get("type") == "user_message":
        client_id = payload.get("client_id")
        return client_id if isinstance(client_id, str) else None
    if payload.get("type") != "item_completed":
        return None
    item = payload.get("item")
    if isinstance(item, dict) and item.get("type") == "UserMessage" and isinstance(item.get("client_id"), str):
        return str(item["client_id"])
    return None


def codex_received(rollout: Path, in_flight: ThoughtRecord, *, by_client_id: bool) -> bool:
    """Whether the rollout shows that Codex received ``in_flight``."""
    messages = user_messages(rollout)
    if by_client_id and any(cid is not None for cid in messages.client_ids):
        if in_flight.thought_id in messages.client_ids:
            return True
        # Torn: the process died after putting the thought into the model history and before the
        # item that carries its client id. Only the newest message can be torn so.
        torn = len(messages.history) > len(messages.texts)
        return torn and text_digest(messages.history[-1]) == in_flight.digest
    return messages.count > in_flight.ordinal


@dataclass(frozen=True, slots=True)
class LastTurn:
    """The newest turn a rollout records."""

    turn_id: str | None
    """Codex's id of it (``None``: the version names no turns, e.g. 0.47)."""
    ended: bool
    """Whether the rollout records its end."""


def last_turn(rollout: Path, conversation: str, thread_id: str) -> LastTurn | None:
    """The newest turn ``rollout`` records (read through the translator egress uses), ``None`` if none."""
    translator = RolloutTranslator(conversation, thread_id)
    last: LastTurn | None = None
    try:
        data = rollout.read_bytes()
    except OSError:
        return None
    for line in LineSplitter(0).feed(data):
        for entry in translator.feed(line):
            if not isinstance(entry, StatusEntry):
                continue
            if entry.state == TURN_STARTED:
                last = LastTurn(entry.turn_id, ended=False)
            elif entry.state in TURN_END_STATES and last is not None and entry.turn_id == last.turn_id:
                last = LastTurn(last.turn_id, ended=True)
    return last


def find_unclaimed_rollout(codex_home: Path, digest: str, claimed: set[str]) -> tuple[str, Path] | None:
    """A rollout no session owns whose first user message has ``digest`` (:func:`text_digest`; newest first)."""
    sessions = codex_home / "sessions"
    if not sessions.is_dir():
        return None
    candidates = sorted(sessions.rglob("rollout-*.jsonl"), key=lambda p: p.stat().st_mtime, reverse=True)
    for path in candidates:
        thread = thread_id_from_path(path)
        if thread is None or thread in claimed:
            continue
        first = user_messages(path).first
        if first is not None and text_digest(first) == digest:
            return thread, path
    return None
