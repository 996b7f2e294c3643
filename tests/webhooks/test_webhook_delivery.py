"""The webhook sender against a real receiver on a loopback socket, on a real journal file."""

from __future__ import annotations

from pathlib import Path

from webhook_journal import SECRET, end, entries_of, reply, sending, start, target, thought, turn, until_saved

from coven_codex.entries import ErrorEntry
from coven_codex.journal import FileJournal
from coven_codex.testing.webhook_receiver import HANG, WebhookReceiver
from coven_codex.webhooks.payload import verify
from coven_codex.webhooks.sender import FAILING_CODE, REJECTED_CODE


def first_acks(receiver: WebhookReceiver) -> list[str]:
    """The keys in the order they were first acknowledged."""
    seen: list[str] = []
    for request in receiver.acknowledged:
        if request.key not in seen:
            seen.append(request.key)
    return seen


async def test_every_turn_is_delivered_through_500_429_and_a_hang_in_order(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = FileJournal(path, durability="never")
    ends = []
    for n in range(3):
        ends.append(await turn(journal, "red", n))
        ends.append(await turn(journal, "blue", n, state="turn_failed" if n == 1 else "turn_completed"))
    answers = [500, (429, {"Retry-After": "1"}), HANG]
    async with WebhookReceiver(SECRET.encode(), answers=answers) as receiver, sending(path, target(receiver.url)):
        await receiver.wait_until(lambda r: len(r.acknowledged) >= 6, timeout=60)
        ends.append(await turn(journal, "red", 3))  # written while the sender runs: read live
        await receiver.wait_until(lambda r: len(r.acknowledged) >= 7, timeout=60)
        await until_saved(journal, ends[-1])
    expected = [record.entry.id for record in ends]
    # The first turn was attempted four times (500, 429, no answer, 200), always with the same key and body.
    assert [r.key for r in receiver.received[:4]] == [expected[0]] * 4
    assert [r.answer for r in receiver.received[:4]] == [500, 429, None, 200]
    assert len({r.body for r in receiver.received[:4]}) == 1
    assert [r.headers["x-coven-attempt"] for r in receiver.received[:5]] == ["1", "2", "3", "4", "1"]
    # Every turn delivered; one key per turn; in journal order (so in order per conversation).
    assert first_acks(receiver) == expected
    assert all(r.signature_ok for r in receiver.received)
    for request in receiver.received:
        payload = request.payload()
        assert request.key == payload["idempotency-key"] == payload["entry-id"]
    payloads = {r.key: r.payload() for r in receiver.acknowledged}
    red0 = payloads["th-red:turn-0:end"]
    assert red0["type"] == "agent-turn-complete"
    assert red0["thread-id"] == "th-red" and red0["turn-id"] == "0" and red0["cwd"] == "/ws"
    assert red0["input-messages"] == ["red q0"] and red0["last-assistant-message"] == "red a0"
    assert red0["status"] == "completed" and red0["error"] is None and red0["conversation"] == "red"
    assert red0["usage"]["input_tokens"] == 10 and red0["duration-seconds"] >= 0 and not red0["truncated"]
    failed = payloads["th-blue:turn-1:end"]
    assert failed["status"] == "failed"
    assert failed["error"] == {"code": "RATE_LIMIT", "message": "429 from the model", "hint": "wait"}
    # The outage is reported in the chat once, not once per retry.
    reports = [e for e in await entries_of(journal) if isinstance(e, ErrorEntry) and e.code == FAILING_CODE]
    assert len(reports) == 1 and reports[0].conversation == "red"
    await journal.aclose()


async def test_a_400_is_reported_once_and_not_retried(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = FileJournal(path, durability="never")
    await turn(journal, "red", 0)
    refused = await turn(journal, "red", 1)
    last = await turn(journal, "red", 2)
    key = refused.entry.id
    assert key is not None
    async with WebhookReceiver(SECRET.encode(), by_key={key: 400}) as receiver:
        async with sending(path, target(receiver.url)):
            await receiver.wait_until(lambda r: len(r.acknowledged) >= 2, timeout=60)
            await until_saved(journal, last)
        # Started again: the refused turn is neither sent nor reported again.
        await turn(journal, "red", 3)
        async with sending(path, target(receiver.url)):
            await receiver.wait_until(lambda r: len(r.acknowledged) >= 3, timeout=60)
    assert [r.key for r in receiver.received].count(key) == 1
    assert first_acks(receiver) == ["th-red:turn-0:end", "th-red:turn-2:end", "th-red:turn-3:end"]
    reports = [e for e in await entries_of(journal) if isinstance(e, ErrorEntry) and e.code.startswith("WEBHOOK_")]
    assert [(e.code, e.conversation, e.in_reply_to) for e in reports] == [
        (REJECTED_CODE, "red", refused.entry.in_reply_to)  # type: ignore[attr-defined]
    ]
    assert "HTTP 400" in reports[0].text and reports[0].hint
    await journal.aclose()


async def test_a_restart_sends_only_what_was_not_acknowledged_and_remembers_open_turns(tmp_path: Path) -> None:
    """Blue's turn is open when red's ends and is acknowledged; after a restart blue's payload still has
    its input message and reply (read again from the context cursor), and red's is not sent again."""
    path = tmp_path / "journal.jsonl"
    journal = FileJournal(path, durability="never")
    blue = await thought(journal, "blue", "blue question")
    await start(journal, "blue", blue, 0)
    await reply(journal, "blue", blue, "blue answer")
    red = await turn(journal, "red", 0)
    async with WebhookReceiver(SECRET.encode()) as receiver:
        async with sending(path, target(receiver.url)):
            await receiver.wait_until(lambda r: len(r.acknowledged) >= 1, timeout=60)
            await until_saved(journal, red)
        await end(journal, "blue", blue, 0)
        async with sending(path, target(receiver.url)):
            await receiver.wait_until(lambda r: len(r.acknowledged) >= 2, timeout=60)
    assert [r.key for r in receiver.received] == ["th-red:turn-0:end", "th-blue:turn-0:end"]
    blue_payload = receiver.received[1].payload()
    assert blue_payload["input-messages"] == ["blue question"]
    assert blue_payload["last-assistant-message"] == "blue answer"
    assert blue_payload["duration-seconds"] is not None
    await journal.aclose()


async def test_cloudevents_wraps_the_payload_and_the_signature_covers_the_exact_body(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = FileJournal(path, durability="never")
    await turn(journal, "red", 0)
    async with (
        WebhookReceiver(SECRET.encode()) as receiver,
        sending(path, target(receiver.url, format="cloudevents")),
    ):
        await receiver.wait_until(lambda r: len(r.acknowledged) >= 1, timeout=60)
    request = receiver.received[0]
    event = request.payload()
    assert request.headers["content-type"].startswith("application/cloudevents+json")
    assert event["specversion"] == "1.0" and event["id"] == request.key == "th-red:turn-0:end"
    assert event["subject"] == "red" and event["data"]["input-messages"] == ["red q0"]
    signature = request.headers["x-coven-signature-256"]
    assert verify(SECRET.encode(), request.body, signature)
    assert not verify(SECRET.encode(), request.body + b" ", signature)
    assert not verify(b"another secret of some length", request.body, signature)
    await journal.aclose()


async def test_a_rotated_journal_is_sent_from_its_beginning(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = FileJournal(path, durability="never")
    first = await turn(journal, "red", 0)
    async with WebhookReceiver(SECRET.encode()) as receiver:
        async with sending(path, target(receiver.url)):
            await receiver.wait_until(lambda r: len(r.acknowledged) >= 1, timeout=60)
            await until_saved(journal, first)
        await journal.aclose()
        path.rename(tmp_path / "journal.jsonl.1")
        journal = FileJournal(path, durability="never")
        await turn(journal, "red", 1)
        async with sending(path, target(receiver.url)):
            await receiver.wait_until(lambda r: len(r.acknowledged) >= 2, timeout=60)
    assert [r.key for r in receiver.received] == ["th-red:turn-0:end", "th-red:turn-1:end"]
    await journal.aclose()
