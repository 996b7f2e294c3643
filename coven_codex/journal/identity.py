"""A journal's identity: what says two names are one journal (docs/configuration.md, "What identifies a journal").

A random id recorded *with the journal* the first time a daemon serves it, never derived from
where the journal is:

- a file journal keeps it in ``<journal>.cursors/journal-id``, beside its cursors (one file for
  every segment; a rotation by hand keeps the path and so the folder; a journal moved with its
  ``.cursors`` folder keeps it);
- a Redis journal keeps it in the key ``<stream key>:journal-id`` (``SET NX``), whatever URL
  reaches that server (a host name or an address, a password or none).

A location would be wrong both ways: the same journal reached another way (moved, a symlink,
another spelling of the Redis URL) would lose its conversations, and a *new* journal at an old
place (a deleted and recreated file, a stream ``DEL``'d and written again) would inherit the old
one's Codex threads. The conversation state is kept per identity
(:mod:`coven_codex.agent.scope`), next to the ingress cursor it must agree with: both are the
record of where the daemon is in this journal.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Final, Protocol, runtime_checkable

from coven_codex.journal.protocol import JournalError

ID_PATTERN: Final = re.compile(r"[0-9a-f]{16}")
"""An identity: 16 hex digits (it names a folder, so nothing else is accepted)."""


class IdentityError(JournalError):
    """The identity recorded for a journal is not one; the message names where it is and what to do."""


@runtime_checkable
class IdentifiedJournal(Protocol):
    """A journal that records its identity (the file, Redis and memory journals)."""

    async def load_identity(self) -> str | None:
        """The identity recorded for the journal (unchecked text), or None when none is."""
        ...

    async def make_identity(self, made: str) -> str:
        """Record ``made`` unless an identity is recorded already; the identity that holds."""
        ...

    def identity_location(self) -> str:
        """Where the identity is kept, for messages."""
        ...


@dataclass(frozen=True, slots=True)
class JournalIdentity:
    """A journal's identity and where it is kept."""

    value: str
    location: str
    made_now: bool
    """The identity was recorded by this call (the journal had none: no daemon of this version served it)."""


def new_journal_id() -> str:
    """A fresh identity: 64 random bits."""
    return secrets.token_hex(8)


def _checked(text: str, location: str) -> str:
    if not ID_PATTERN.fullmatch(text):
        raise IdentityError(
            f"the journal's identity in {location} is corrupt ({text[:40]!r}, expected 16 hex digits); restore it"
            " from a backup, or delete it to make this journal a new one (its conversations then start afresh)"
        )
    return text


def _as_identified(journal: object) -> IdentifiedJournal:
    if not isinstance(journal, IdentifiedJournal):
        raise JournalError(f"{journal!r} cannot record an identity, so its conversations cannot be kept apart")
    return journal


async def find_identity(journal: object) -> JournalIdentity | None:
    """The identity recorded for ``journal``, or None (nothing is written)."""
    identified = _as_identified(journal)
    location = identified.identity_location()
    text = await identified.load_identity()
    return None if text is None else JournalIdentity(_checked(text, location), location, made_now=False)


async def journal_identity(journal: object) -> JournalIdentity:
    """The identity of ``journal``, recorded now when it has none (several processes may race: one wins)."""
    found = await find_identity(journal)
    if found is not None:
        return found
    identified = _as_identified(journal)
    location = identified.identity_location()
    made = new_journal_id()
    holds = _checked(await identified.make_identity(made), location)
    return JournalIdentity(holds, location, made_now=holds == made)
