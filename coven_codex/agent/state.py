"""Per-conversation session state, persisted per journal under ``settings.resolved_state_dir`` (:mod:`.scope`).

One log per conversation (``sessions/<slug>-<hash>.state``) holds everything a restarted
daemon needs to continue that conversation without losing or repeating a message:

- the Codex thread id and the rollout file it writes;
- the egress position: ``egress_offset`` (every rollout line before it reached the journal);
- the replay window (:mod:`~coven_codex.agent.replay`): ``replay_from`` (``None``, or a journal
  position at or before every entry of this conversation a restart may produce again: a restart
  reads the journal only from there) and ``own_ids`` (the newest ids the session wrote itself);
- the ingress record: ``in_flight`` (written *before* a thought is handed to Codex) and
  ``delivered`` (thought id → journal position, written after), so no thought reaches Codex twice.

Each save appends the whole state as one line (see :class:`StateStore`); a reader takes the last
complete line, so it sees the old state or the new one, never a mixture, even after
``kill -9``. Compaction rewrites a log atomically (temporary file, fsync, ``os.replace``).
With ``durability = "batched"`` the fsyncs of saves made at the same time are shared (group
commit), and a save the daemon waits for is on disk before it goes on, as with ``"always"``.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import re
import threading
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError, model_validator

from coven_codex.codex.thought import Thought
from coven_codex.entries import ConversationSettings
from coven_codex.journal import START, Durability, Position
from coven_codex.journal.atomic import atomic_write, fsync_directory, write_all
from coven_codex.journal.group_commit import GroupCommit
from coven_codex.journal.protocol import StoredPosition
from coven_codex.support.statelock import StateError

__all__ = [
    "OpenTurn",
    "SessionState",
    "StateStorageError",
    "StateStore",
    "ThoughtRecord",
    "atomic_write",
    "state_file_name",
]

log = logging.getLogger(__name__)

STATE_VERSION = 3
"""1: ``egress_journal_position`` (the journal's end when the egress offset was saved); 2: the replay window;
3: one :class:`ThoughtRecord` for ``in_flight`` and ``reply_targets`` (2 kept the in-flight thought's text)."""
OWN_IDS_KEPT = 32
"""How many ids of entries the session wrote itself a state keeps (a turn writes at most two: error and end)."""
STATE_SUFFIX = ".state"
SESSIONS_DIR = "sessions"
"""The folder of the state logs inside a store's root."""
COMPACT_BYTES = 256 * 1024
MAX_OPEN_LOGS = 32
"""State logs kept open for appending at most; the least recently written others are reopened when saved."""
_SLUG_RE = re.compile(r"[^A-Za-z0-9_.-]+")


class OpenTurn(BaseModel):
    """The turn running in Codex, recorded so that a restart can end it if a kill cut it short."""

    key: str
    """The turn's name in its entry ids when Codex gives it no id: the thought that started it."""
    turn_id: str | None = None
    """Codex's id of the turn, once the driver told it."""


REPLY_TARGETS_KEPT = 8
"""How many of a thread's newest user messages keep their thought id (a turn takes one, or a few when steered)."""


def text_digest(text: str) -> str:
    """What a :class:`ThoughtRecord` keeps of a thought's text: the first 16 hex digits of its SHA-256."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


class ThoughtRecord(BaseModel):
    """The state's record of a :class:`~coven_codex.codex.thought.Thought` handed to Codex as the
    thread's user message ``ordinal`` (made once, by :meth:`SessionState.hand_over`): written ahead
    as ``in_flight`` before the hand-over starts, and kept among the ``reply_targets`` (for
    ``in_reply_to``) after it."""

    thought_id: str
    ordinal: int = 0
    """Which of the thread's user messages it is: how many of our thoughts the thread had received
    before it (resolving an in-flight thought on exec counts them)."""
    digest: str
    """:func:`text_digest` of its text (checks which user message it is; the text itself is not kept)."""
    position: StoredPosition | None = None
    """Its journal position (``None`` only in reply targets a version 2 state kept, which had none)."""


class SessionState(BaseModel):
    """What is persisted for one conversation."""

    version: int = STATE_VERSION
    conversation: str
    thread_id: str | None = None
    rollout_path: str | None = None
    egress_offset: int = 0
    replay_from: StoredPosition | None = None
    """Where a restart looks for entries of this conversation it may produce again; ``None``: none
    (:mod:`~coven_codex.agent.replay`)."""
    own_ids: list[str] = Field(default_factory=list)
    """Ids of the newest :data:`OWN_IDS_KEPT` entries the session wrote itself, oldest first."""
    in_flight: ThoughtRecord | None = None
    """The thought being handed to Codex (written before the hand-over starts), until it is settled."""
    delivered: dict[str, StoredPosition] = Field(default_factory=dict)
    user_messages: int = 0
    """Thoughts this thread has received from us (used to resolve in-flight thoughts on exec)."""
    reply_targets: dict[int, ThoughtRecord] = Field(default_factory=dict)
    """Ordinal of a user message in the thread → the thought it is (the newest few; written with
    ``in_flight``): egress puts it on the entries of that message's turn as ``in_reply_to``."""
    reply_to: str | None = None
    """The newest thought handed to Codex: what the session's own entries of a turn answer."""
    open_turn: OpenTurn | None = None
    """The turn running in Codex (``None`` once it ended): a restart finding one ends it, unless the
    rollout recorded its end (``turn_aborted``, "interrupted by a restart")."""
    workspace: str | None = None
    """The thread's working directory (a ``cwd`` checked against ``workspace_roots``); ``None``: the daemon's."""
    model: str | None = None
    """The thread's model (``None``: Codex's configured one)."""
    turn_timeout: float | None = None
    """Seconds each turn of the thread may run (``None``: ``turn_timeout``)."""
    fork_from: str | None = None
    """The thread the next new thread is forked from (``resume_thread``), until that thread exists."""
    chat: ConversationSettings = Field(default_factory=ConversationSettings)
    """The settings chosen from the chat (``/project``, ``/model``, ``/mode``): kept over resets, applied to
    every thread (:mod:`~coven_codex.conversation.settings`)."""

    @model_validator(mode="before")
    @classmethod
    def _from_older_versions(cls, data: Any) -> Any:
        """A state saved by version 1 replays from its ``egress_journal_position`` (from the
        journal's start when it had a thread and none): that is what a restart read then. Version 2
        kept the in-flight thought's text and the message it would be as ``user_messages_before``,
        and each reply target's thought id and digest under its ordinal: one record each now."""
        if not isinstance(data, dict) or data.get("version", STATE_VERSION) >= STATE_VERSION:
            return data
        data = dict(data)
        if data.get("version", STATE_VERSION) < 2:
            position = data.pop("egress_journal_position", None)
            if position is None and data.get("thread_id") is not None:
                position = START
            data["replay_from"] = position
        in_flight = data.get("in_flight")
        if isinstance(in_flight, dict) and "text" in in_flight:
            data["in_flight"] = {
                "thought_id": in_flight.get("thought_id"),
                "ordinal": in_flight.get("user_messages_before", 0),
                "digest": text_digest(str(in_flight["text"])),
                "position": in_flight.get("position"),
            }
        targets = data.get("reply_targets")
        if isinstance(targets, dict):
            data["reply_targets"] = {
                key: {"ordinal": key, **target} if isinstance(target, dict) else target
                for key, target in targets.items()
            }
        data["version"] = STATE_VERSION
        return data

    def wrote(self, entry_id: str) -> None:
        """The session itself appended an entry with this id (see ``own_ids``)."""
        self.own_ids.append(entry_id)
        del self.own_ids[:-OWN_IDS_KEPT]

    def hand_over(self, thought: Thought) -> None:
        """``thought`` is being handed to Codex as the thread's next user message: its record is in
        flight, the reply target of that message, and the newest thought handed over (``reply_to``)."""
        record = ThoughtRecord(
            thought_id=thought.id,
            ordinal=self.user_messages,
            digest=text_digest(thought.text),
            position=thought.position,
        )
        self.in_flight = record
        self.expect_reply(record)

    def expect_reply(self, record: ThoughtRecord) -> None:
        """The thread's user message ``record.ordinal`` will be ``record``'s thought (the newest handed over)."""
        self.reply_targets[record.ordinal] = record
        for old in sorted(self.reply_targets)[:-REPLY_TARGETS_KEPT]:
            del self.reply_targets[old]
        self.reply_to = record.thought_id

    def thought_of(self, ordinal: int, client_id: str | None, text: str) -> str | None:
        """The thought that is the thread's user message ``ordinal`` (a
        :data:`~coven_codex.rollout.translator.ReplyLookup`).

        A client id (0.169) names it. Otherwise the message at ``ordinal`` is taken if its text
        matches (a message is counted once Codex records its event; a process killed between
        the thread's history and the event leaves one message uncounted, hence the next one is
        tried too). With no text (a turn's start), the thought expected at ``ordinal``.
        """
        if client_id is not None:
            return client_id
        if not text:
            target = self.reply_targets.get(ordinal)
            return target.thought_id if target is not None else None
        digest = text_digest(text)
        for at in (ordinal, ordinal + 1):
            target = self.reply_targets.get(at)
            if target is not None and target.digest == digest:
                return target.thought_id
        return None

    def forget_thread(self) -> None:
        """The thread is over (reset): the next thought starts a new one."""
        self.thread_id = None
        self.rollout_path = None
        self.egress_offset = 0
        self.user_messages = 0
        self.reply_targets = {}
        self.open_turn = None

    def forget_delivered_before(self, position: Position) -> None:
        """Drop delivered ids the ingress cursor has moved past: they will never be re-read."""
        stale = [key for key, pos in self.delivered.items() if pos < position]
        for key in stale:
            del self.delivered[key]


def state_file_name(conversation: str) -> str:
    """A file name that is safe, readable and unique per conversation."""
    digest = hashlib.sha256(conversation.encode("utf-8")).hexdigest()[:12]
    slug = _SLUG_RE.sub("_", conversation)[:40].strip("._") or "conversation"
    return f"{slug}-{digest}{STATE_SUFFIX}"


STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO})
"""The errors that mean the storage itself failed (full, over quota, read-only, broken); any other
``OSError`` (a permission, a folder replaced by a file) is a fault the sessions back off from."""


class StateStorageError(StateError):
    """A state save failed for lack of storage (disk full, quota, read-only, I/O error).

    The log is left as it was before the save (a partly written line is cut off again), so a
    later load sees the previous state.
    """


class StateStore:
    """Loads and saves :class:`SessionState` logs in ``<root>/sessions`` (the daemon's root: the folder of
    its journal's conversations, ``<state_dir>/journals/<journal identity>``, :mod:`~coven_codex.agent.scope`).

    Each conversation has one append-only log: every save appends the whole state as one JSON
    line (one ``write()``, about a microsecond, versus a quarter of a millisecond or more for a
    temp-file-and-rename). Loading takes the last line that parses, so a torn last line
    (possible only on power loss) falls back to the state before it; a write-ahead that did not
    land means the hand-over it guarded never started. When a log grows past ``compact_bytes``
    it is rewritten atomically (temp file, fsync, rename) with only its newest line.

    ``durability`` is the journal's setting, with the same promise: ``"always"`` fsyncs each
    write before :meth:`write` returns; ``"batched"`` marks the log dirty and
    :meth:`wait_durable` returns once an fsync covering it finished, saves in flight at the
    same time sharing one round of fsyncs (the journal's :class:`GroupCommit`); ``"never"``
    leaves flushing to the OS. Either way a save that is awaited with :meth:`wait_durable` (the
    write-ahead before a hand-over, the delivered mark before the cursor moves) survives a
    power cut unless durability is ``"never"``.
    """

    def __init__(
        self, state_dir: Path, *, durability: Durability = "always", compact_bytes: int = COMPACT_BYTES
    ) -> None:
        self.root = state_dir
        self.sessions_dir = state_dir / SESSIONS_DIR
        self.durability: Durability = durability
        self.compact_bytes = compact_bytes
        self._fds: dict[str, tuple[int, int]] = {}  # conversation -> (fd, bytes written so far)
        self._lock = threading.Lock()  # _fds and _dirty, shared with the group commit's thread
        self._dirty: set[str] = set()
        self._directory_dirty = False
        """A log was created since the last group commit (``"batched"``): its fsync covers the directory too."""
        self._group_commit = GroupCommit(self._sync_dirty)

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
        """The state file of ``conversation`` in the sessions directory."""
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
        """``conversation``'s saved state, or a new empty state when none is saved (or readable)."""
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
        log.error(
            "session state %s is unreadable (%s); moved it to %s and starting that conversation afresh",
            path,
            problem,
            aside,
        )
        return None

    def save(self, state: SessionState) -> None:
        """Append ``state`` and make it durable now (blocking; start-up and shutdown)."""
        self.write(state.conversation, state.model_dump_json().encode("utf-8"))
        self.flush()

    def write(self, conversation: str, data: bytes) -> None:
        """Append a serialised state (taken by the caller at a consistent moment).

        Durable on return with ``"always"``; with ``"batched"`` once :meth:`wait_durable`
        returns. Raises :class:`StateStorageError` (the log unchanged) when the disk refuses it.
        """
        line = data + b"\n"
        try:
            with self._lock:
                fd, size = self._fds.get(conversation) or self._open(conversation)
                if size + len(line) > self.compact_bytes:
                    atomic_write(self.path_for(conversation), line, durable=self.durability != "never")
                    os.close(fd)  # the old, replaced file
                    del self._fds[conversation]
                    self._open(conversation)
                    return
                try:
                    write_all(fd, line)
                except OSError:
                    with contextlib.suppress(OSError):
                        os.ftruncate(fd, size)  # never leave half a line for the next save to join
                    raise
                self._fds.pop(conversation, None)
                self._fds[conversation] = (fd, size + len(line))  # (the newest last: least recent first)
                if self.durability == "batched":
                    self._dirty.add(conversation)
            if self.durability == "always":
                os.fsync(fd)
            self._close_least_recent()
        except OSError as exc:
            if exc.errno not in STORAGE_ERRNOS:
                raise
            raise self._storage_error(conversation, exc) from None

    def _storage_error(self, conversation: str, exc: OSError) -> StateStorageError:
        return StateStorageError(
            f"cannot save the state of conversation {conversation[:40]!r} in {self.sessions_dir}:"
            f" {exc.strerror or exc}; free space on that filesystem (or fix its permissions)"
        )

    async def wait_durable(self) -> None:
        """Return once every :meth:`write` made before the call is on disk (``"batched"``)."""
        if self.durability == "batched":
            await self._group_commit.wait_durable()

    def _sync_dirty(self) -> None:
        """One round of the group commit: fsync every log written since the last round."""
        with self._lock:
            dirty = [(c, os.dup(self._fds[c][0])) for c in self._dirty if c in self._fds]
            self._dirty.clear()
            directory, self._directory_dirty = self._directory_dirty, False
        try:
            if directory:
                try:
                    fsync_directory(self.sessions_dir)
                except OSError as exc:
                    with self._lock:
                        self._directory_dirty = True  # the next round tries again
                    if exc.errno not in STORAGE_ERRNOS:
                        raise
                    raise StateStorageError(
                        f"cannot make new session states durable in {self.sessions_dir}: {exc.strerror or exc};"
                        " free space on that filesystem (or fix its permissions)"
                    ) from None
            for conversation, fd in dirty:
                try:
                    os.fsync(fd)
                except OSError as exc:
                    if exc.errno not in STORAGE_ERRNOS:
                        raise
                    raise self._storage_error(conversation, exc) from None
        finally:
            for _conversation, fd in dirty:
                os.close(fd)

    def flush(self) -> None:
        """Make every write so far durable now (blocking)."""
        if self.durability == "batched":
            self._sync_dirty()

    def _close_least_recent(self) -> None:
        """Keep at most :data:`MAX_OPEN_LOGS` logs open: close the least recently written ones
        that have nothing waiting for an fsync (an idle conversation holds no file descriptor)."""
        with self._lock:
            excess = len(self._fds) - MAX_OPEN_LOGS
            if excess <= 0:
                return
            for conversation in [c for c in self._fds if c not in self._dirty][:excess]:
                fd, _size = self._fds.pop(conversation)
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _open(self, conversation: str) -> tuple[int, int]:
        path = self.path_for(conversation)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        size = os.fstat(fd).st_size
        if size == 0 and self.durability == "batched":
            # A new log: the group commit makes its directory entry durable with its first line,
            # off the event loop (a directory fsync took ~10 ms each on a loaded disk: issue 33).
            self._directory_dirty = True
        elif size == 0 and self.durability == "always":
            fsync_directory(path.parent)
        entry = (fd, size)
        self._fds[conversation] = entry
        return entry

    def close(self) -> None:
        """Flush what is not durable yet (best effort: a failure is logged) and close the logs."""
        try:
            self.flush()
        except StateStorageError as exc:
            log.error("%s", exc)
        for fd, _size in self._fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()
