"""Per-conversation session state, persisted under ``settings.resolved_state_dir``.

One JSON file per conversation (``sessions/<slug>-<hash>.json``) holds everything a restarted
daemon needs to continue that conversation without losing or repeating a message:

- the Codex thread id and the rollout file it writes;
- the egress position: ``egress_offset`` (every rollout line before it reached the journal) and
  ``egress_journal_position`` (the journal's end when that offset was saved, so a restart only
  re-reads the journal from there to learn which entry ids already exist);
- the ingress record: ``in_flight`` (written *before* a thought is handed to Codex) and
  ``delivered`` (thought id → journal position, written after), so no thought reaches Codex twice.

Writes are atomic: a temporary file in the same directory, written whole, optionally fsynced,
then ``os.replace``d over the old file (and the directory fsynced when durable). A reader
therefore sees the old state or the new one, never a mixture, even after ``kill -9``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

log = logging.getLogger(__name__)

STATE_VERSION = 1
_SLUG_RE = re.compile(r"[^A-Za-z0-9_.-]+")


class InFlight(BaseModel):
    """A thought being handed to Codex; recorded before the hand-over starts."""

    thought_id: str
    position: int
    text: str
    thread_id: str | None = None
    user_messages_before: int = 0
    """How many of our thoughts the thread had received before this one (exec resolution)."""


class SessionState(BaseModel):
    """What is persisted for one conversation."""

    version: int = STATE_VERSION
    conversation: str
    thread_id: str | None = None
    rollout_path: str | None = None
    egress_offset: int = 0
    egress_journal_position: int | None = None
    in_flight: InFlight | None = None
    delivered: dict[str, int] = Field(default_factory=dict)
    user_messages: int = 0
    """Thoughts this thread has received from us (used to resolve in-flight thoughts on exec)."""

    def forget_delivered_before(self, position: int) -> None:
        """Drop delivered ids the ingress cursor has moved past: they will never be re-read."""
        stale = [key for key, pos in self.delivered.items() if pos < position]
        for key in stale:
            del self.delivered[key]


class StateError(RuntimeError):
    """The state directory cannot be used; the message says what to do."""


def state_file_name(conversation: str) -> str:
    """A file name that is safe, readable and unique per conversation."""
    digest = hashlib.sha256(conversation.encode("utf-8")).hexdigest()[:12]
    slug = _SLUG_RE.sub("_", conversation)[:40].strip("._") or "conversation"
    return f"{slug}-{digest}.json"


def atomic_write(path: Path, data: bytes, *, durable: bool) -> None:
    """Write ``data`` to ``path`` atomically (temp file + rename), fsynced when ``durable``."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class StateStore:
    """Loads and saves :class:`SessionState` files in ``<state_dir>/sessions``."""

    def __init__(self, state_dir: Path, *, durable: bool = True) -> None:
        self.root = state_dir
        self.sessions_dir = state_dir / "sessions"
        self.durable = durable

    def prepare(self) -> None:
        """Create the directories (0700); raise :class:`StateError` if that is impossible."""
        try:
            self.sessions_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise StateError(
                f"cannot create the state directory {self.sessions_dir}: {exc.strerror}; "
                "set state_dir to a writable directory"
            ) from None
        if not os.access(self.sessions_dir, os.W_OK):
            raise StateError(
                f"the state directory {self.sessions_dir} is not writable; fix its permissions or set state_dir"
            )

    def path_for(self, conversation: str) -> Path:
        return self.sessions_dir / state_file_name(conversation)

    def load_all(self) -> dict[str, SessionState]:
        """Every saved session; unreadable files are logged and set aside, never fatal."""
        states: dict[str, SessionState] = {}
        if not self.sessions_dir.is_dir():
            return states
        for path in sorted(self.sessions_dir.glob("*.json")):
            state = self._load_file(path)
            if state is not None:
                states[state.conversation] = state
        return states

    def load(self, conversation: str) -> SessionState:
        state = self._load_file(self.path_for(conversation))
        return state if state is not None else SessionState(conversation=conversation)

    def _load_file(self, path: Path) -> SessionState | None:
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.error("cannot read session state %s: %s", path, exc.strerror)
            return None
        try:
            return SessionState.model_validate(json.loads(raw))
        except (json.JSONDecodeError, UnicodeDecodeError, ValidationError) as exc:
            aside = path.with_suffix(".corrupt")
            with contextlib.suppress(OSError):
                os.replace(path, aside)
            log.error("session state %s is unreadable (%s); moved it to %s and starting that conversation "
                      "afresh", path, str(exc).splitlines()[0][:120], aside)
            return None

    def save(self, state: SessionState) -> None:
        self.write(state.conversation, state.model_dump_json().encode("utf-8"))

    def write(self, conversation: str, data: bytes) -> None:
        """Write a serialised state (taken by the caller at a consistent moment)."""
        atomic_write(self.path_for(conversation), data, durable=self.durable)
