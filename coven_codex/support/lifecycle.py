"""A lifecycle: one phase of an enum, moved only through a table of allowed transitions.

The owner keeps its :class:`Lifecycle` private and is the only one to move it; every move is
checked against the table, and a move the table does not hold raises :class:`LifecycleError`
(a bug in the owner, reported with the owner's name and where its table lives). Staying in a
phase is no move.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Generic, TypeVar

P = TypeVar("P", bound=enum.Enum)


class LifecycleError(RuntimeError):
    """A move the transition table does not allow: a bug in the owner's code."""


def transitions(*moves: tuple[P, Iterable[P]]) -> frozenset[tuple[P, P]]:
    """The table of allowed moves from ``(source, targets)`` pairs."""
    return frozenset((source, target) for source, targets in moves for target in targets)


class Lifecycle(Generic[P]):
    """The owner's current phase; every move is checked against its table (module docstring)."""

    __slots__ = ("_owner", "_phase", "_table", "_where")

    def __init__(self, owner: str, table: frozenset[tuple[P, P]], phase: P, *, where: str) -> None:
        """``owner`` names it in the error (``conversation 'red'``); ``where`` says where the table is."""
        self._owner = owner
        self._table = table
        self._phase = phase
        self._where = where

    @property
    def phase(self) -> P:
        """The phase the owner is in."""
        return self._phase

    def move(self, to: P) -> None:
        """Move to ``to``; :class:`LifecycleError` if the table forbids it (the phase is kept)."""
        if to is self._phase:
            return
        if (self._phase, to) not in self._table:
            raise self._refused(to)
        self._phase = to

    def is_in(self, *phases: P) -> bool:
        """Whether the owner is in one of ``phases``."""
        return self._phase in phases

    def _refused(self, to: P) -> LifecycleError:
        return LifecycleError(
            f"{self._owner}: no move from {self._phase.value} to {to.value} ({self._where}): "
            "a bug, please report it with the daemon log"
        )
