"""Recent spell outcomes, so that egress can tell a failed spell call on Codex versions whose
rollout keeps no error flag.

Codex 0.47 records an MCP tool result only as a ``function_call_output`` holding the content
(no ``isError``), and its ``tools/call`` carries no call id. What both sides do have is the
spell's name, its arguments and the text of the result: the spell server records each outcome
under a digest of those three, and egress looks up the ``function_call`` / ``function_call_output``
pair it reads from the rollout. The store is bounded (oldest outcomes are forgotten first) and
lives in the daemon's memory only: after a restart, results of calls made before it are not
found and keep the flag the rollout gives them.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from typing import Any

from coven_codex.entries import BaseEntry, ToolCallEntry, ToolResultEntry
from coven_codex.mcp.codex_entry import SERVER_NAME
from coven_codex.mcp.messages import CallToolResult

MAX_OUTCOMES = 4096


def outcome_key(spell_name: str, arguments: Any, text: str) -> str:
    """The digest a call is remembered under: spell name, canonical arguments, result text."""
    try:
        canonical = json.dumps(
            arguments if arguments is not None else {},
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
        )
    except (TypeError, ValueError):
        canonical = repr(arguments)
    digest = hashlib.sha256()
    for part in (spell_name, canonical, text):
        data = part.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()


class SpellOutcomes:
    """A bounded map from :func:`outcome_key` to whether that call failed (thread-safe)."""

    def __init__(self, limit: int = MAX_OUTCOMES) -> None:
        self._limit = max(1, limit)
        self._failed: OrderedDict[str, bool] = OrderedDict()
        self._lock = threading.Lock()

    def record(self, spell_name: str, arguments: Any, result: CallToolResult) -> None:
        """Remember the outcome of one call of ``spell_name``."""
        key = outcome_key(spell_name, arguments, result.text())
        with self._lock:
            self._failed[key] = result.isError
            self._failed.move_to_end(key)
            while len(self._failed) > self._limit:
                self._failed.popitem(last=False)

    def failed(self, spell_name: str, arguments: Any, text: str) -> bool | None:
        """Whether the call with this name, arguments and result text failed; None if unknown."""
        with self._lock:
            return self._failed.get(outcome_key(spell_name, arguments, text))

    def __len__(self) -> int:
        with self._lock:
            return len(self._failed)


recent_outcomes = SpellOutcomes()
"""The daemon's store: every :class:`SpellServer` records into it unless given another."""


class SpellCalls:
    """Egress's side: pairs the spell calls of one rollout with their results and corrects the
    error flag of a result the rollout calls a success when the spell server saw it fail."""

    def __init__(self, outcomes: SpellOutcomes | None = None, limit: int = MAX_OUTCOMES) -> None:
        self._outcomes = outcomes if outcomes is not None else recent_outcomes
        self._limit = max(1, limit)
        self._calls: OrderedDict[str, tuple[str, Any]] = OrderedDict()  # call id -> (spell, arguments)

    def correct(self, entry: BaseEntry) -> BaseEntry:
        """``entry``, with ``is_error`` set on a spell result the server knows failed."""
        if isinstance(entry, ToolCallEntry):
            prefix = f"{SERVER_NAME}."
            if entry.call_id is not None and entry.tool.startswith(prefix):
                self._calls[entry.call_id] = (entry.tool[len(prefix) :], entry.arguments)
                while len(self._calls) > self._limit:
                    self._calls.popitem(last=False)
        elif isinstance(entry, ToolResultEntry) and not entry.is_error and entry.call_id is not None:
            call = self._calls.pop(entry.call_id, None)
            if call is not None and self._outcomes.failed(call[0], call[1], entry.text):
                return entry.model_copy(update={"is_error": True})
        return entry
