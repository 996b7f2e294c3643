"""A write refused because this daemon no longer holds the conversation's lease (raised by the cluster's fenced
journal, caught by the sessions); importable without the ``redis`` package."""

from __future__ import annotations


class LeaseLost(Exception):
    """A write for a conversation was refused: this daemon no longer holds its lease."""

    def __init__(self, conversation: str) -> None:
        super().__init__(f"this daemon no longer holds the lease of conversation {conversation[:60]!r}")
        self.conversation = conversation


def lease_lost(exc: BaseException) -> LeaseLost | None:
    """The :class:`LeaseLost` in ``exc`` (looking inside exception groups), or None."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = lease_lost(inner)
            if found is not None:
                return found
        return None
    return exc if isinstance(exc, LeaseLost) else None
