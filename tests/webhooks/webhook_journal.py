"""Helpers for the webhook tests: daemon-like turns written into a real journal, a sender on it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from coven_codex.entries import (
    ErrorEntry,
    ResponseEntry,
    StatusEntry,
    ThoughtEntry,
    TokenUsage,
)
from coven_codex.journal import FileJournal, Journal, JournalRecord
from coven_codex.webhooks.config import WebhookTarget, ready_targets
from coven_codex.webhooks.sender import TargetSender, cursor_names
from coven_codex.webhooks.service import webhook_senders

SECRET = "0123456789abcdef0123456789abcdef"
ENV = {"TEST_WEBHOOK_SECRET": SECRET}


def target(url: str, **fields: object) -> WebhookTarget:
    """A target for ``url`` with the test secret, short timeouts, starting at the journal's beginning."""
    values: dict[str, object] = {
        "url": url,
        "name": "test",
        "secret_env": "TEST_WEBHOOK_SECRET",
        "timeout": 0.5,
        "max_delay": 2.0,
        "start": "beginning",
    }
    values.update(fields)
    return WebhookTarget.model_validate(values)


@contextlib.asynccontextmanager
async def sending(path: Path, *targets: WebhookTarget) -> AsyncIterator[list[TargetSender]]:
    """The senders of ``targets`` on a journal handle of their own, as the daemon and the command run them."""
    journal = FileJournal(path, durability="never", follow_replacement=False)
    try:
        async with webhook_senders(journal, ready_targets(list(targets), ENV), default_cwd="/ws") as senders:
            yield senders
    finally:
        await journal.aclose()


async def thought(journal: Journal, conversation: str, text: str) -> str:
    """Append a thought; its id."""
    record = await journal.append(ThoughtEntry(conversation=conversation, text=text))
    assert record.entry.id is not None
    return record.entry.id


async def start(journal: Journal, conversation: str, thought_id: str, n: int) -> None:
    """The daemon's ``turn_started`` for turn ``n``."""
    await journal.append(
        StatusEntry(
            id=f"th-{conversation}:turn-{n}:start",
            conversation=conversation,
            state="turn_started",
            in_reply_to=thought_id,
            thread_id=f"th-{conversation}",
            turn_id=str(n),
        )
    )


async def reply(journal: Journal, conversation: str, thought_id: str, text: str) -> None:
    """A ``response`` of the daemon."""
    await journal.append(ResponseEntry(conversation=conversation, text=text, in_reply_to=thought_id))


async def end(
    journal: Journal, conversation: str, thought_id: str, n: int, state: str = "turn_completed"
) -> JournalRecord:
    """The daemon's turn end for turn ``n`` (id ``th-<conversation>:turn-<n>:end``)."""
    return await journal.append(
        StatusEntry(
            id=f"th-{conversation}:turn-{n}:end",
            conversation=conversation,
            state=state,
            in_reply_to=thought_id,
            thread_id=f"th-{conversation}",
            turn_id=str(n),
            usage=TokenUsage(input_tokens=10 + n, output_tokens=n, total_tokens=10 + 2 * n),
        )
    )


async def turn(journal: Journal, conversation: str, n: int, state: str = "turn_completed") -> JournalRecord:
    """A whole turn: thought ``q<n>``, its start, the reply ``a<n>``, its end."""
    thought_id = await thought(journal, conversation, f"{conversation} q{n}")
    await start(journal, conversation, thought_id, n)
    await reply(journal, conversation, thought_id, f"{conversation} a{n}")
    if state == "turn_failed":
        await journal.append(
            ErrorEntry(
                conversation=conversation,
                code="RATE_LIMIT",
                text="429 from the model",
                hint="wait",
                in_reply_to=thought_id,
            )
        )
    return await end(journal, conversation, thought_id, n, state)


async def entries_of(journal: Journal) -> list[object]:
    """Every entry of the journal."""
    return [item.entry for item in await journal.read() if isinstance(item, JournalRecord)]


async def until_saved(journal: Journal, record: JournalRecord, *, timeout: float = 30.0) -> None:
    """Wait (at most ``timeout`` s) until the test target's delivered-through cursor is just after ``record``:
    the sender saves it after the receiver's acknowledgement, so a test stopping the sender waits for it."""
    name = cursor_names("test")[0]
    async with asyncio.timeout(timeout):
        while await journal.load_cursor(name) != record.end:
            await asyncio.sleep(0.02)
