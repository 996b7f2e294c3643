"""A recording fake chat platform driven by the kit's real runner: the contract suite's reference adapter.

Run as a process: ``python fake_platform.py --journal J --record R --inbox I [options]``.

- **The record** (``R``, JSON lines) is the platform's side: every post (``id``, ``key``,
  ``channel``, ``thread``, ``text``, ``final``, ``buttons``), edit, delete and typing change is
  appended in one ``write`` as it happens, so it survives a ``kill -9`` of this process exactly as a
  real service's history would. :func:`find` answers from it (the platform's idempotency memory).
- **The inbox** (``I``, JSON lines) is what users do: ``{"type": "message", "channel", "user",
  "text", "attachments", "id"}`` or ``{"type": "press", "channel", "user", "action"}``. It is tailed;
  the position of the next event is kept in ``I.pos`` (events are handled at least once).
- A post whose text contains ``FORBIDDEN`` is refused for good (:class:`PlatformError`).
- ``--rate-limit-every N`` answers every N-th platform call with a 429 (``retry_after`` 0.05 s).
- ``--render quiet`` shows a progress card per turn (the kit's default is ``verbose``).
- ``--chaos P``: after recording a post or an edit, the process kills itself (SIGKILL) with
  probability P, before the runner hears back: the one moment a ledger without reconciliation
  would repeat a message.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

from coven_codex.adapters.kit.access import AccessPolicy
from coven_codex.adapters.kit.ledger import DeliveryLedger, ledger_path
from coven_codex.adapters.kit.mapping import ChannelMap
from coven_codex.adapters.kit.platform import (
    Address,
    ButtonPress,
    Capabilities,
    Incoming,
    IncomingMessage,
    Outgoing,
    PlatformError,
    RateLimited,
    User,
)
from coven_codex.adapters.kit.render import PlainDialect, RenderMode, RenderOptions
from coven_codex.adapters.kit.runner import AdapterRunner, RunnerOptions
from coven_codex.entries import Attachment
from coven_codex.journal import FileJournal
from coven_codex.tailing import tail_lines

PLATFORM = "fake"
FOLLOWING = "the fake platform's runner follows the journal"
"""Logged once the runner follows the journal: the tests start streaming only then."""


class RecordingPlatform:
    """The platform: its record on disk is the truth a user would see."""

    name = PLATFORM

    def __init__(
        self, record: Path, inbox: Path, limit: int, edit_interval: float, rate_limit_every: int, *, chaos: float = 0.0
    ) -> None:
        self.chaos = chaos
        self.dialect = PlainDialect(limit)
        self.capabilities = Capabilities(edit_interval=edit_interval, can_find=True, echoes_own_messages=True)
        self.record = record
        self.inbox = inbox
        self.rate_limit_every = rate_limit_every
        self._calls = 0
        self._keys: dict[str, str] = {}
        if record.exists():
            for line in record.read_text().splitlines():
                op = json.loads(line)
                if op["op"] == "post" and op.get("key"):
                    self._keys[op["key"]] = op["id"]
        self._fd = os.open(record, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def _write(self, op: dict[str, object]) -> None:
        op["t"] = time.monotonic()
        os.write(self._fd, (json.dumps(op) + "\n").encode())
        if op["op"] in ("post", "edit") and random.random() < self.chaos:
            os.kill(os.getpid(), signal.SIGKILL)

    def _limit(self) -> None:
        self._calls += 1
        if self.rate_limit_every and self._calls % self.rate_limit_every == 0:
            raise RateLimited(0.05)

    async def post(self, address: Address, message: Outgoing, key: str | None) -> str:
        self._limit()
        if "FORBIDDEN" in message.text:
            raise PlatformError("message contains a forbidden word")
        message_id = uuid.uuid4().hex[:12]
        self._write(
            {
                "op": "post",
                "id": message_id,
                "key": key,
                "channel": address.channel,
                "thread": address.thread,
                "text": message.text,
                "final": message.final,
                "style": message.style,
                "buttons": [[button.label, button.action] for button in message.buttons],
            }
        )
        if key is not None:
            self._keys[key] = message_id
        return message_id

    async def edit(self, address: Address, message_id: str, message: Outgoing) -> None:
        self._limit()
        self._write(
            {
                "op": "edit",
                "id": message_id,
                "text": message.text,
                "final": message.final,
                "buttons": [[button.label, button.action] for button in message.buttons],
            }
        )

    async def delete(self, address: Address, message_id: str) -> None:
        self._limit()
        self._write({"op": "delete", "id": message_id})

    async def typing(self, address: Address, active: bool) -> None:
        self._write({"op": "typing", "channel": address.channel, "active": active})

    async def find(self, address: Address, key: str) -> str | None:
        self._limit()
        return self._keys.get(key)

    async def incoming(self) -> AsyncIterator[Incoming]:
        position_file = self.inbox.with_name(self.inbox.name + ".pos")
        start = int(position_file.read_text()) if position_file.exists() else 0
        self.inbox.touch()
        async for line in tail_lines(self.inbox, start):
            event = json.loads(line.data)
            address = Address(channel=event["channel"], thread=event.get("thread", ""))
            user = User(id=event["user"], name=event.get("name", ""), roles=frozenset(event.get("roles", ())))
            if event["type"] == "quit":
                position_file.write_text(str(line.end))
                return
            if event["type"] == "press":
                yield ButtonPress(address, user, event["action"])
            else:
                attachments = tuple(Attachment.model_validate(a) for a in event.get("attachments", ()))
                yield IncomingMessage(address, user, event["text"], attachments, message_id=event.get("id", ""))
            position_file.write_text(str(line.end))


async def main(args: argparse.Namespace) -> None:
    journal = FileJournal(args.journal)
    platform = RecordingPlatform(
        args.record, args.inbox, args.limit, args.edit_interval, args.rate_limit_every, chaos=args.chaos
    )
    ledger = DeliveryLedger.open(ledger_path(args.journal, PLATFORM))
    access = AccessPolicy(users=frozenset(args.allow), admins=frozenset(args.admin))
    runner = AdapterRunner(
        journal,
        platform,
        ChannelMap(PLATFORM, per_user=frozenset(args.per_user)),
        access,
        ledger,
        name=PLATFORM,
        options=RunnerOptions(
            render=RenderOptions(show_reasoning=True, mode=RenderMode(args.render)), start="beginning"
        ),
    )

    async def announce() -> None:
        await runner.ready.wait()
        logging.getLogger(PLATFORM).info("%s", FOLLOWING)

    announcer = asyncio.create_task(announce())
    try:
        await runner.run()
    finally:
        announcer.cancel()
        ledger.close()
        await journal.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--journal", type=Path, required=True)
    parser.add_argument("--record", type=Path, required=True)
    parser.add_argument("--inbox", type=Path, required=True)
    parser.add_argument("--allow", action="append", default=[])
    parser.add_argument("--admin", action="append", default=[])
    parser.add_argument("--per-user", action="append", default=[])
    parser.add_argument("--limit", type=int, default=2000)
    parser.add_argument("--edit-interval", type=float, default=0.2)
    parser.add_argument("--rate-limit-every", type=int, default=0)
    parser.add_argument("--chaos", type=float, default=0.0)
    parser.add_argument("--render", choices=[mode.value for mode in RenderMode], default="verbose")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    asyncio.run(main(parser.parse_args()))
