"""A thought on its way to Codex: one value from admission to the driver's edge.

The conversation makes a :class:`Thought` once, from the journal's ``ThoughtEntry`` when it
admits it (:meth:`Thought.admitted`), and hands that value on as it is: on the conversation's
inbox, in its queue, to the hand-over (whose write-ahead record is made from it) and to the
driver, which queues it while another turn runs and turns it into Codex's input only at its edge
(app-server: the ``turn/start`` and ``turn/steer`` params; exec: the ``--image`` arguments and
the text on stdin). Checking it on the conversation's task (its thread options, its images)
gives the same value with those fields filled in.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coven_codex.entries import Attachment, ThoughtEntry
from coven_codex.journal import Position


@dataclass(frozen=True, slots=True)
class ImageInput:
    """An image a thought carries: a local file (``path``) or, where the driver takes one, an ``https`` ``url``."""

    path: Path | None = None
    url: str | None = None


@dataclass(frozen=True, slots=True)
class ThreadOptions:
    """How a conversation's Codex thread is opened: its working directory (already checked against
    ``workspace_roots``; ``None``: the daemon's workspace), model, turn timeout, the thread it forks
    and the thread it takes over (continues)."""

    workspace: str | None = None
    model: str | None = None
    turn_timeout: float | None = None
    fork_from: str | None = None
    take_over: str | None = None
    """The Codex thread the conversation continues (``resume_thread``) instead of opening a new one."""
    mode: str | None = None
    """The conversation's mode (``/mode``; a name of ``MODES``): Codex's approval policy and sandbox."""


@dataclass(frozen=True, slots=True)
class Thought:
    """A thought routed to a conversation and not yet settled (delivered, or given up).

    Its id is the journal entry's, and the client id Codex records with the user message."""

    id: str
    text: str
    position: Position
    """Where the journal holds it (finished in the ingress cursor once it is settled)."""
    attachments: tuple[Attachment, ...] = ()
    """Its attachments as the entry names them (checked into :attr:`images` when the conversation takes it)."""
    images: tuple[ImageInput, ...] = ()
    options: ThreadOptions | None = None
    """The options of the thread the thought starts, if it starts one (checked when the conversation takes it)."""
    output_schema: dict[str, Any] | None = None
    """The JSON Schema its turn's final answer must match (the entry's ``output_schema``)."""

    @classmethod
    def admitted(cls, entry: ThoughtEntry, position: Position) -> Thought:
        """The thought of ``entry``, read at ``position`` (its id assigned)."""
        assert entry.id is not None
        return cls(entry.id, entry.text, position, tuple(entry.attachments), output_schema=entry.output_schema)
