"""A token held in memory that never shows itself: not in ``repr``, ``str``, formatting or a pickle.

The adapters' tokens (:mod:`coven_codex.adapters.kit.config`) and the webhooks' signing secrets
(:mod:`coven_codex.webhooks.config`) are both held as a :class:`Secret`, so none reaches a log line.
"""

from __future__ import annotations

from typing import Any


class Secret:
    """A token held in memory: :meth:`reveal` gives it; ``repr``/``str``/formatting never show it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The token itself: pass it to the platform's client, nowhere else."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return repr(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self) -> tuple[Any, ...]:
        raise TypeError("a Secret is not pickled (it would carry the token)")
