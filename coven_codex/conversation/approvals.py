"""A conversation's approvals: requests of Codex asked in the chat, and the chat's answers passed back.

The requests still unanswered belong to the open driver (:attr:`~coven_codex.conversation.link.OpenCodex.approvals`:
they end with it); this part decides what each request, answer and resolution means for the chat.
The approval timeout and the policy are the driver's (:mod:`coven_codex.codex.drivers`).
"""

from __future__ import annotations

import logging

from coven_codex.agent.state import SessionState
from coven_codex.codex.drivers import ApprovalRequested, ApprovalResolved, DriverError
from coven_codex.codex.errors import classify
from coven_codex.conversation.link import OpenCodex
from coven_codex.conversation.outbox import Outbox
from coven_codex.entries import ApprovalEntry, ApprovalRequestEntry, StatusEntry
from coven_codex.settings import Settings
from coven_codex.support.limits import cut

log = logging.getLogger(__name__)


class Approvals:
    """Asks the chat, passes its answers on, and says when a request timed out (module docstring)."""

    def __init__(self, state: SessionState, settings: Settings, outbox: Outbox, name: str) -> None:
        self._state = state
        self._settings = settings
        self._outbox = outbox
        self._name = name

    async def answer(self, codex: OpenCodex | None, entry: ApprovalEntry) -> None:
        """The chat answered ``entry.request_id``: pass the decision on (an unknown request is ignored)."""
        if codex is None or entry.request_id not in codex.approvals:
            log.info(
                "conversation %r: approval for unknown or expired request %s ignored", self._name, cut(entry.request_id)
            )
            return
        codex.approvals.discard(entry.request_id)
        try:
            await codex.driver.answer_approval(
                entry.request_id, entry.decision != "deny", for_session=entry.decision == "approve_for_session"
            )
        except DriverError as exc:
            await self._outbox.error(
                classify(str(exc)).code,
                f"could not pass the approval on to Codex: {exc}",
                "The Codex process may have ended; the session will be resumed.",
            )

    async def asked(self, codex: OpenCodex, event: ApprovalRequested) -> None:
        """Codex asks: the chat is asked (or told how the policy answered)."""
        policy = self._settings.approval_policy
        if policy == "ask":
            codex.approvals.add(event.request_id)
            text = event.action
        else:
            text = f"{event.action} (answered by approval_policy = {policy!r}; nothing to do)"
        await self._outbox.emit(
            ApprovalRequestEntry(
                request_id=event.request_id,
                action=event.action,
                call_id=event.call_id,
                text=text,
                in_reply_to=self._state.reply_to,
            )
        )

    async def resolved(self, codex: OpenCodex, event: ApprovalResolved) -> None:
        """The driver settled a request (answered, or denied when no answer came in time)."""
        codex.approvals.discard(event.request_id)
        if event.by == "timeout":
            text = f"no answer to approval {event.request_id} within {self._settings.approval_timeout:.0f}s; denied"
            await self._outbox.emit(StatusEntry(state="approval_timeout", text=text, in_reply_to=self._state.reply_to))
