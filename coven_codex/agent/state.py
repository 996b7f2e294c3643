"""Per-conversation session state, persisted under ``settings.resolved_state_dir``.

One log per conversation (``sessions/<slug>-<hash>.state``) holds everything a restarted
daemon needs to continue that conversation without losing or repeating a message:

- the Codex thread id and the rollout file it writes;
- the egress position: ``egress_offset`` (every rollout line before it reached the journal) and
  ``egress_journal_position`` (the journal's end when that offset was saved, so a restart only
  re-reads the journal from there to learn which entry ids already exist);
- the ingress record: ``in_flight`` (written *before* a thought is handed to Codex) and
  ``delivered`` (thought id → journal position, written after), so no thought reaches Codex twice.

Each save appends the whole state as one line (see :class:`StateStore`); a reader takes the last
complete line, so it sees the old state or the new one, never a mixture, even after
``kill -9``. Compaction rewrites a log atomically (temporary file, fsync, ``os.replace``).
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
STATE_SUFFIX = ".state"
COMPACT_BYTES = 256 * 1024
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
    return f"{slug}-{digest}{STATE_SUFFIX}"


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
    """Loads and saves :class:`SessionState` logs in ``<state_dir>/sessions``.

    Each conversation has one append-only log: every save appends the whole state as one JSON
    line (one ``write()``, about a microsecond, versus a quarter of a millisecond or more for a
    temp-file-and-rename), fsynced when ``durable``. Loading takes the last line that parses,
    so a torn last line (possible only on power loss) falls back to the state before it; a
    write-ahead that did not land means the hand-over it guarded never started. When a log
    grows past ``compact_bytes`` it is rewritten atomically (temp file, fsync, rename) with only
    its newest line.
    """

    def __init__(self, state_dir: Path, *, durable: bool = True, compact_bytes: int = COMPACT_BYTES) -> None:
        self.root = state_dir
        self.sessions_dir = state_dir / "sessions"
        self.durable = durable
        self.compact_bytes = compact_bytes
        self._fds: dict[str, tuple[int, int]] = {}  # conversation -> (fd, bytes written so far)

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
        """Every saved session; unreadable logs are logged and set aside, never fatal."""
        states: dict[str, SessionState] = {}
        if not self.sessions_dir.is_dir():
            return states
        for path in sorted(self.sessions_dir.glob(f"*{STATE_SUFFIX}")):
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
        problem = "it is empty"
        for line in reversed(raw.split(b"\n")):
            if not line.strip():
                continue
            try:
                return SessionState.model_validate(json.loads(line))
            except (json.JSONDecodeError, UnicodeDecodeError, ValidationError) as exc:
                problem = str(exc).splitlines()[0][:120]
                log.warning("session state %s: skipping an unreadable line (%s)", path, problem)
        aside = path.with_suffix(".corrupt")
        with contextlib.suppress(OSError):
            os.replace(path, aside)
        log.error("session state %s is unreadable (%s); moved it to %s and starting that conversation afresh",
                  path, problem, aside)
        return None

    def save(self, state: SessionState) -> None:
        self.write(state.conversation, state.model_dump_json().encode("utf-8"))

    def write(self, conversation: str, data: bytes) -> None:
        """Append a serialised state (taken by the caller at a consistent moment)."""
        line = data + b"\n"
        fd, size = self._fds.get(conversation) or self._open(conversation)
        if size + len(line) > self.compact_bytes:
            os.close(fd)
            atomic_write(self.path_for(conversation), line, durable=self.durable)
            fd, size = self._open(conversation)
            self._fds[conversation] = (fd, size)
            return
        view = memoryview(line)
        while view:
            view = view[os.write(fd, view):]
        if self.durable:
            os.fsync(fd)
        self._fds[conversation] = (fd, size + len(line))

    def _open(self, conversation: str) -> tuple[int, int]:
        path = self.path_for(conversation)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        if self.durable and os.fstat(fd).st_size == 0:
            fsync_dir(path.parent)
        entry = (fd, os.fstat(fd).st_size)
        self._fds[conversation] = entry
        return entry

    def close(self) -> None:
        for fd, _size in self._fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()
