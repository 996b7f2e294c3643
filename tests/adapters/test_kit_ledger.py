"""The delivery ledger on disk: durable intents and results, torn lines, compaction."""

from __future__ import annotations

from pathlib import Path

import pytest

from coven_codex.adapters.kit import ledger as ledger_module
from coven_codex.adapters.kit.ledger import (
    Delivery,
    DeliveryLedger,
    LedgerError,
    content_digest,
    delivery_key,
    ledger_path,
)


async def test_intents_and_results_survive_a_reopen(tmp_path: Path) -> None:
    path = ledger_path(tmp_path / "journal.jsonl", "web chat")
    assert path == tmp_path / "journal.jsonl.adapters" / "web%20chat.ledger.jsonl"
    ledger = DeliveryLedger.open(path)
    await ledger.intend("k1")
    await ledger.done("k1", "m1")
    await ledger.intend("k2")
    ledger.close()
    with path.open("ab") as handle:
        handle.write(b'{"key": "k3", "mess')  # a crash in the middle of a write
    again = DeliveryLedger.open(path)
    intent = again.get("k2")
    assert again.get("k1") == Delivery("m1") and again.get("k3") is None
    assert intent is not None and intent.message_id is None and intent.at is not None
    await again.done("k2", "m2")
    again.close()
    assert DeliveryLedger.open(path).get("k2") == Delivery("m2")


async def test_keys_are_deterministic_and_distinct() -> None:
    assert delivery_key("e1", 0) == delivery_key("e1", 0)
    assert len({delivery_key("e1", 0), delivery_key("e1", 1), delivery_key("e2", 0), delivery_key("e1", "end")}) == 4
    assert len(delivery_key("e1", 0)) == 32


async def test_old_keys_are_dropped_when_opening(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ledger_module, "KEEP_KEYS", 3)
    path = tmp_path / "l.jsonl"
    ledger = DeliveryLedger.open(path)
    for n in range(6):
        await ledger.done(f"k{n}", f"m{n}")
    ledger.close()
    reopened = DeliveryLedger.open(path)
    assert reopened.get("k2") is None and reopened.get("k5") == Delivery("m5")
    assert len(path.read_text().splitlines()) == 3


def test_an_unwritable_folder_says_what_to_do(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(LedgerError, match=r"cannot open the delivery ledger .* writable"):
        DeliveryLedger.open(blocker / "sub" / "l.jsonl")


async def test_an_intent_keeps_its_time_and_text_digest_across_a_reopen_and_a_compaction(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    ledger = DeliveryLedger.open(path)
    await ledger.intend("k1", content_digest("the reply"))
    await ledger.intend("k2")
    await ledger.done("k2", "m2")
    ledger.close()
    with path.open("ab") as torn:
        torn.write(b'{"key": "k3"')  # a torn last line: the ledger is rewritten on open
    again = DeliveryLedger.open(path)
    again.close()
    intent = DeliveryLedger.open(path).get("k1")
    assert intent is not None and intent.message_id is None
    assert intent.digest == content_digest("the reply") and intent.at is not None
    assert DeliveryLedger.open(path).taken("m2") and not DeliveryLedger.open(path).taken("m1")
