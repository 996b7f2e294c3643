"""After a crash: did Codex receive the thought that was in flight?

Codex's rollout is the record of what it received, so it decides:

- app-server (0.169): ``turn/start`` carried ``clientUserMessageId = <thought id>`` and Codex
  records it as ``client_id`` on the ``UserMessage`` item of an ``event_msg``/``item_completed``
  line; the thought was received iff that line exists;
- exec (0.47 records only the text, as ``event_msg``/``user_message``): the thread had received
  ``user_messages_before`` of our thoughts before this one; it was received iff the rollout holds
  more user messages than that;
- exec's first thought of a conversation: the thread id was not known yet, so we look for an
  unclaimed rollout in ``$CODEX_HOME/sessions`` whose first user message is the thought's text.

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

from coven_codex.agent.state import InFlight
from coven_codex.rollout.locator import thread_id_from_path

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class UserMessages:
    client_ids: list[str | None]
    texts: list[str]


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
    event_texts: list[str] = []
    for record in _records(path):
        if record.get("type") != "event_msg":
            continue
        payload = record.get("payload")
        if not isinstance(payload, dict):
            continue
        kind = payload.get("type")
        if kind == "user_message":
            event_texts.append(str(payload.get("message", "")))
        elif kind == "item_completed":
            item = payload.get("item")
            if isinstance(item, dict) and item.get("type") == "UserMessage":
                client_id = item.get("client_id")
                item_ids.append(client_id if isinstance(client_id, str) else None)
                item_texts.append(_content_text(item.get("content")))
    if len(item_texts) >= len(event_texts):
        return UserMessages(item_ids, item_texts)
    return UserMessages([None] * len(event_texts), event_texts)


def _content_text(content: Any) -> str:
    if not isinstance(content, list):
        return ""
    return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))


def recorded_client_id(line: bytes) -> str | None:
    """The ``client_id`` of a rollout line recording a user message (0.169), else ``None``."""
    try:
        record = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    payload = record.get("payload") if isinstance(record, dict) else None
    if record.get("type") != "event_msg" or not isinstance(payload, dict) or payload.get("type") != "item_completed":
        return None
    item = payload.get("item")
    if isinstance(item, dict) and item.get("type") == "UserMessage" and isinstance(item.get("client_id"), str):
        return str(item["client_id"])
    return None


def codex_received(rollout: Path, in_flight: InFlight, *, by_client_id: bool) -> bool:
    """Whether the rollout shows that Codex received ``in_flight``."""
    messages = user_messages(rollout)
    if by_client_id and in_flight.thought_id in messages.client_ids:
        return True
    if by_client_id and any(cid is not None for cid in messages.client_ids):
        return False
    return len(messages.texts) > in_flight.user_messages_before


def find_unclaimed_rollout(codex_home: Path, text: str, claimed: set[str]) -> tuple[str, Path] | None:
    """A rollout no session owns whose first user message is ``text`` (newest first)."""
    sessions = codex_home / "sessions"
    if not sessions.is_dir():
        return None
    candidates = sorted(sessions.rglob("rollout-*.jsonl"), key=lambda p: p.stat().st_mtime, reverse=True)
    for path in candidates:
        thread = thread_id_from_path(path)
        if thread is None or thread in claimed:
            continue
        texts = user_messages(path).texts
        if texts and texts[0] == text:
            return thread, path
    return None
