"""Telegram's repeat window: from Telegram creating a message to the ledger's durable record of its id.

Run: ``.venv/bin/python benchmarks/bench_telegram_window.py [--posts 200]``

Telegram has no idempotency key and a bot cannot read a chat's history, so a ``kill -9`` inside
this window repeats that one message after the restart (docs/adapters.md, Exactly once). Measured
in one process on one clock (``time.perf_counter``): the adapter's own code path
(:meth:`TelegramPlatform.post` through python-telegram-bot and httpx, then
:meth:`DeliveryLedger.done`, which writes and fsyncs) against the local fake Bot API
(``tests/adapters/telegram_fake.py``), whose ``after_write`` hook marks the moment the message
exists on the platform. Printed: p50, p99 and max of the window, and of the fsync'd ledger record alone.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "adapters"))

from telegram_fake import TEST_TOKEN, FakeTelegram

from coven_codex.adapters.kit.config import Secret
from coven_codex.adapters.kit.ledger import DeliveryLedger, content_digest, delivery_key
from coven_codex.adapters.kit.platform import Address, Outgoing
from coven_codex.adapters.telegram.platform import TelegramPlatform, make_bot


def _quantiles(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"p50 {statistics.median(ordered) * 1000:.2f} ms, p99 {p99 * 1000:.2f} ms, max {ordered[-1] * 1000:.2f} ms"


async def measure(posts: int) -> tuple[list[float], list[float]]:
    fake = FakeTelegram()
    created: list[float] = []
    fake.after_write = lambda method: created.append(time.perf_counter())
    await fake.start()
    bot = make_bot(Secret(TEST_TOKEN), fake.base)
    platform = TelegramPlatform(bot)
    windows: list[float] = []
    records: list[float] = []
    with tempfile.TemporaryDirectory() as folder:
        ledger = DeliveryLedger.open(Path(folder) / "telegram.ledger.jsonl")
        try:
            await platform.start()
            address = Address(channel="5001")
            for n in range(posts):
                key = delivery_key(f"entry-{n}", 0)
                message = Outgoing(f"codex: reply {n}")
                await ledger.intend(key, content_digest(message.text))
                message_id = await platform.post(address, message, key)
                answered = time.perf_counter()
                await ledger.done(key, message_id)
                recorded = time.perf_counter()
                windows.append(recorded - created[-1])
                records.append(recorded - answered)
        finally:
            ledger.close()
            await platform.close()
            await bot.shutdown()
            await fake.stop()
    return windows, records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posts", type=int, default=200)
    args = parser.parse_args()
    windows, records = asyncio.run(measure(args.posts))
    print(f"telegram repeat window over {len(windows)} posts (message created -> ledger record fsynced):")
    print(f"  window:        {_quantiles(windows)}")
    print(f"  ledger record: {_quantiles(records)} (write + fsync, the part after the answer)")


if __name__ == "__main__":
    main()
