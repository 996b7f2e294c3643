"""A chat adapter on the kit: a JSON-lines "platform" on stdin/stdout, in under 60 lines.

Run: python examples/kit_adapter.py JOURNAL.jsonl ALLOWED_USER...   (with `coven-codex run --journal JOURNAL.jsonl`)
Type {"channel": "c1", "user": "ann", "text": "hello"}; posts and edits come out as JSON lines.
This file is reproduced in docs/adapters.md; a test keeps the two identical.
"""

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from coven_codex.adapters.kit.access import AccessPolicy
from coven_codex.adapters.kit.ledger import DeliveryLedger, ledger_path
from coven_codex.adapters.kit.mapping import ChannelMap
from coven_codex.adapters.kit.platform import Address, Capabilities, Incoming, IncomingMessage, Outgoing, User
from coven_codex.adapters.kit.render import Dialect, PlainDialect
from coven_codex.adapters.kit.runner import AdapterRunner
from coven_codex.journal import FileJournal


class JsonLinesPlatform:
    name = "jsonl"
    dialect: Dialect = PlainDialect(limit=2000)
    capabilities = Capabilities(edit_interval=1.0, can_find=False)  # stdout cannot be asked: at least once

    count = 0

    def emit(self, **fields: object) -> None:
        print(json.dumps(fields), flush=True)

    async def post(self, address: Address, message: Outgoing, key: str | None) -> str:
        self.count += 1
        buttons = [button.action for button in message.buttons]
        self.emit(op="post", id=self.count, channel=address.channel, text=message.text, buttons=buttons)
        return str(self.count)

    async def edit(self, address: Address, message_id: str, message: Outgoing) -> None:
        self.emit(op="edit", id=int(message_id), text=message.text, final=message.final)

    async def delete(self, address: Address, message_id: str) -> None:
        self.emit(op="delete", id=int(message_id))

    async def typing(self, address: Address, active: bool) -> None:
        self.emit(op="typing", channel=address.channel, active=active)

    async def find(self, address: Address, key: str) -> str | None:
        return None  # never asked: can_find is False

    async def incoming(self) -> AsyncIterator[Incoming]:
        loop = asyncio.get_running_loop()
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            event = json.loads(line)
            yield IncomingMessage(Address(channel=event["channel"]), User(id=event["user"]), event["text"])


async def main(path: Path, allowed: list[str]) -> None:
    journal, ledger = FileJournal(path), DeliveryLedger.open(ledger_path(path, "jsonl"))
    access = AccessPolicy(users=frozenset(allowed), admins=frozenset(allowed[:1]))
    await AdapterRunner(journal, JsonLinesPlatform(), ChannelMap("jsonl"), access, ledger, name="jsonl").run()
    ledger.close()
    await journal.aclose()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2:]))
