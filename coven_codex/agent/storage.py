"""When the daemon's storage fails (disk full, quota, read-only, I/O error): stop, say so once.

A daemon that cannot write its journal, cursors or state cannot keep its promises (every
thought answered once, every reply written once), and retrying would only repeat the failure
for every conversation. So the first such failure is logged once, the daemon shuts down the
usual way (turns stopped, Codex processes ended, what can still be saved saved) and exits 1
with :func:`failure_message`. Nothing written before is damaged: journal lines, cursors and
state saves are all-or-nothing, so a restart once space is freed resumes where it stopped.
"""

from __future__ import annotations

from coven_codex.agent.state import STORAGE_ERRNOS, StateStorageError
from coven_codex.journal import StorageError
from coven_codex.journal.redis.errors import HoldLost, JournalLost, JournalUnavailable, RedisMisconfigured


class StorageFailed(RuntimeError):
    """The daemon stopped because its storage failed; the message says what to do."""


def storage_failure(exc: BaseException) -> BaseException | None:
    """The storage failure in ``exc`` (looking inside exception groups), or None."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = storage_failure(inner)
            if found is not None:
                return found
        return None
    if isinstance(exc, StorageError | StateStorageError):
        return exc
    if isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS:
        return exc
    return None


def failure_message(failure: BaseException) -> str:
    """The one paragraph the daemon exits with."""
    if isinstance(failure, JournalUnavailable):  # the journal's Redis stayed down: its message says what to do
        return (
            f"stopped because its journal could not be reached: {failure}. No thought was answered twice;"
            " thoughts not answered yet are answered after a restart."
        )
    if isinstance(failure, JournalLost | RedisMisconfigured | HoldLost):  # each says what happened and what to do
        return f"stopped: {failure}."
    return (
        f"stopped because its storage failed: {failure}. Everything written before that is intact,"
        " and no thought was answered twice; thoughts not answered yet are answered after a restart."
        " Free space on that filesystem (df -h shows it), or fix the disk, then start the daemon again."
    )
