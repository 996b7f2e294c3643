"""Jobs that finish whatever dies: the daemon continues a job whose turn was cut short (docs/jobs.md).

A job's turn cut short by a daemon or Codex death (its end ``turn_aborted`` without a cancel, or
``turn_failed`` with ``PROCESS_EXITED``) leaves the job waiting for a continuation
(:attr:`JobRecord.awaiting_continuation`) when it may be continued (once; not when it was
submitted with ``continue_after_restart: false``). The supervisor, a journal reader in the daemon,
writes that continuation: one thought in the job's conversation, id
``job-continue:<job id>:<attempt>``, asking Codex to go on. The session hands it to the job's
own thread (resumed: the model sees everything the cut-short turn did). The supervisor decides
from the whole journal: after a crash between the cut-short end and the continuation, the next
start writes it; once written it is never written again.
"""

from __future__ import annotations

import logging

from coven_codex.entries import ThoughtEntry
from coven_codex.jobs.client import JOB_SENDER
from coven_codex.jobs.records import CONTINUATION_TEXT, JobFolder, continuation_id, job_conversation
from coven_codex.journal import Journal, JournalRecord, Position

log = logging.getLogger(__name__)


async def continue_cut_short_jobs(journal: Journal) -> None:
    """Follow ``journal`` and write each due continuation once; runs until cancelled."""
    folder, end, written = await continue_due_jobs(journal)
    async for item in journal.tail(end) if end is not None else journal.tail():
        if isinstance(item, JournalRecord):
            folder.feed(item.entry)
            if folder.awaiting_continuation:
                await _write_due(journal, folder, written)


async def continue_due_jobs(journal: Journal) -> tuple[JobFolder, Position | None, set[str]]:
    """The start: write the continuations the whole journal says are due (a crash may have left
    some unwritten). Returns the jobs as read, where the journal ended, and the ids written."""
    folder = JobFolder()
    end: Position | None = None
    for item in await journal.read():
        if isinstance(item, JournalRecord):
            folder.feed(item.entry)
            end = item.end
    written: set[str] = set()
    await _write_due(journal, folder, written)
    return folder, end, written


async def _write_due(journal: Journal, folder: JobFolder, written: set[str]) -> None:
    for job in folder.awaiting_continuation:
        entry_id = continuation_id(job.id, job.attempts + 1)
        if entry_id in written:
            continue  # written; not read back yet
        written.add(entry_id)
        why = job.interruptions[-1].message if job.interruptions else "cut short"
        log.warning(
            "job %s was cut short (%s); continuing it in its thread (attempt %d)", job.id, why, job.attempts + 1
        )
        await journal.append(
            ThoughtEntry(id=entry_id, conversation=job_conversation(job.id), sender=JOB_SENDER, text=CONTINUATION_TEXT)
        )
