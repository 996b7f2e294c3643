"""Where the daemon's trace records go: one JSONL file per Codex thread (docs/configuration.md, Traces).

Codex tags each of its log records with the thread it belongs to (the ``conversation.id``
attribute, the thread id the daemon keeps for each conversation). :class:`ThreadRouter` splits
every log export by that id and writes each part, as a record of its own, to
``<dir>/<thread id>.jsonl``; log records without an id, spans and metrics (which Codex does not tag
reliably) go to ``<dir>/codex.jsonl``. Every file is rotated by size (``.1``, ``.2``, ...). At most
:data:`MAX_OPEN` files are open at once: the least recently written one is closed (flushed and
fsynced) to make room, and reopened for appending when its thread writes again.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from pathlib import Path

from pydantic import JsonValue

from coven_codex.traces.records import TraceRecord
from coven_codex.traces.writer import JsonlWriter

SHARED_FILE = "codex.jsonl"
MAX_FILE_BYTES = 32 * 2**20
BACKUPS = 3
MAX_OPEN = 32
CONVERSATION_KEY = "conversation.id"
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class ThreadRouter:
    """A record sink writing each thread's log records to a file of its own, rotated by size."""

    def __init__(self, directory: Path, *, max_bytes: int = MAX_FILE_BYTES, backups: int = BACKUPS) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.backups = backups
        self._writers: OrderedDict[str, JsonlWriter] = OrderedDict()
        self._lock = threading.Lock()

    def write(self, record: TraceRecord) -> None:
        """Write ``record``, split by thread when it holds log records."""
        for thread, part in split_by_thread(record):
            self._writer(thread).write(part)

    def close(self) -> None:
        """Flush, fsync and close every file."""
        with self._lock:
            writers = list(self._writers.values())
        for writer in writers:
            writer.close()

    def _writer(self, thread: str | None) -> JsonlWriter:
        name = f"{thread}.jsonl" if thread is not None else SHARED_FILE
        with self._lock:
            writer = self._writers.pop(name, None)
            if writer is None:
                writer = JsonlWriter(self.directory / name, max_bytes=self.max_bytes, backups=self.backups)
            self._writers[name] = writer  # the most recently used is last
            while len(self._writers) > MAX_OPEN:
                _, oldest = self._writers.popitem(last=False)
                oldest.close()
            return writer


def split_by_thread(record: TraceRecord) -> list[tuple[str | None, TraceRecord]]:
    """``record`` as parts that each belong to one thread (``None``: to none in particular)."""
    resources = record.payload.get("resourceLogs")
    if record.signal != "logs" or not isinstance(resources, list):
        return [(None, record)]
    parts: dict[str | None, list[JsonValue]] = {}
    for resource in resources:
        if not isinstance(resource, dict):
            parts.setdefault(None, []).append(resource)
            continue
        by_thread: dict[str | None, list[JsonValue]] = {}
        scopes = resource.get("scopeLogs")
        for scope in scopes if isinstance(scopes, list) else []:
            if not isinstance(scope, dict):
                continue
            grouped: dict[str | None, list[JsonValue]] = {}
            logs = scope.get("logRecords")
            for log_record in logs if isinstance(logs, list) else []:
                grouped.setdefault(_thread_of(log_record), []).append(log_record)
            for thread, items in grouped.items():
                by_thread.setdefault(thread, []).append({**scope, "logRecords": items})
        for thread, scope_parts in by_thread.items():
            parts.setdefault(thread, []).append({**resource, "scopeLogs": scope_parts})
    return [
        (thread, record.model_copy(update={"payload": {**record.payload, "resourceLogs": items}}))
        for thread, items in parts.items()
    ]


def _thread_of(log_record: JsonValue) -> str | None:
    if not isinstance(log_record, dict):
        return None
    attributes = log_record.get("attributes")
    for attribute in attributes if isinstance(attributes, list) else []:
        if isinstance(attribute, dict) and attribute.get("key") == CONVERSATION_KEY:
            value = attribute.get("value")
            text = value.get("stringValue") if isinstance(value, dict) else None
            if isinstance(text, str) and _SAFE_ID.fullmatch(text):
                return text
    return None
