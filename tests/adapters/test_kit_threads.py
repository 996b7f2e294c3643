"""The kit's followed threads (kept in the delivery ledger) and a thread's earlier messages as context."""

from __future__ import annotations

from pathlib import Path

import pytest

from coven_codex.adapters.kit import ledger as ledger_module
from coven_codex.adapters.kit.ledger import DeliveryLedger, ledger_path
from coven_codex.adapters.kit.mapping import ChannelMap
from coven_codex.adapters.kit.platform import Address
from coven_codex.adapters.kit.threads import (
    CONTEXT_CLOSE,
    CONTEXT_OPEN,
    ContextLimits,
    EarlierMessage,
    FollowedThreads,
    with_context,
)

THREAD = Address(channel="C1", workspace="T1", thread="1700000001.000001")


def _follows(path: Path) -> FollowedThreads:
    return FollowedThreads(DeliveryLedger.open(path), ChannelMap("slack", per_user=frozenset({"CPER"})))


async def test_a_followed_thread_and_a_refused_stranger_survive_a_reopen(tmp_path: Path) -> None:
    path = ledger_path(tmp_path / "journal.jsonl", "slack")
    follows = _follows(path)
    conversation = follows.conversation(THREAD, "UANN")
    assert conversation == "slack:T1/C1/1700000001.000001" and not follows.followed(conversation)
    await follows.follow(conversation)
    assert await follows.first_refusal(conversation, "USTRANGER")
    follows.ledger.close()
    again = _follows(path)
    assert again.followed(conversation)
    assert not await again.first_refusal(conversation, "USTRANGER")
    assert await again.first_refusal(conversation, "UOTHER")
    assert again.ledger.pending == 0  # marks are not deliveries waiting
    again.ledger.close()


async def test_in_a_per_user_channel_each_user_s_own_conversation_is_followed(tmp_path: Path) -> None:
    follows = _follows(tmp_path / "l.jsonl")
    thread = Address(channel="CPER", workspace="T1", thread="1.2")
    await follows.follow(follows.conversation(thread, "UANN"))
    assert follows.followed(follows.conversation(thread, "UANN"))
    assert not follows.followed(follows.conversation(thread, "UBOB"))
    follows.ledger.close()


async def test_a_thread_renewed_by_its_messages_outlives_compaction_and_a_silent_one_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ledger_module, "KEEP_KEYS", 4)
    path = tmp_path / "l.jsonl"
    follows = _follows(path)
    busy = follows.conversation(THREAD, "U")
    silent = follows.conversation(Address(channel="C2", workspace="T1", thread="2.0"), "U")
    await follows.follow(silent)
    await follows.follow(busy)
    for n in range(3):
        await follows.ledger.done(f"k{n}", f"m{n}")
        await follows.follow(busy)  # a follow-up in the busy thread renews it
    follows.ledger.close()
    again = _follows(path)
    assert again.followed(busy) and not again.followed(silent)
    again.ledger.close()


def test_the_context_keeps_the_newest_messages_that_fit_oldest_first_and_counts_the_rest() -> None:
    earlier = [EarlierMessage(f"user{n}", f"message {n}") for n in range(10)]
    text = with_context("the question", earlier, ContextLimits(messages=20, chars=60), omitted=5)
    context, _, request = text.partition(CONTEXT_CLOSE + "\n\n")
    assert request == "the question"
    assert "[user9] message 9" in context and "[user8] message 8" in context
    assert context.index("message 8") < context.index("message 9")
    assert "message 0" not in context
    kept = sum(f"message {n}" in context for n in range(10))
    assert f"({5 + 10 - kept} earlier message(s) left out.)" in context


def test_no_context_when_turned_off_or_empty() -> None:
    earlier = [EarlierMessage("a", "b")]
    assert with_context("q", earlier, ContextLimits(messages=0)) == "q"
    assert with_context("q", earlier, ContextLimits(chars=0)) == "q"
    assert with_context("q", [], ContextLimits()) == "q"
    assert with_context("q", earlier, ContextLimits()).startswith(CONTEXT_OPEN)
