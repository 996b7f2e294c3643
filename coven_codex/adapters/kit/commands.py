"""The chat commands, the same on every platform (typed as ``/name`` or pressed as buttons).

- ``cancel``: stop the running turn;
- ``new``: start a fresh Codex session in this conversation (appends a ``reset`` entry);
- ``status``: running or idle, queued thoughts, thread id, token usage of the last turn;
- ``approve [ID]`` / ``deny [ID]``: answer an approval request (the oldest open one by default);
- ``help``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

COMMANDS = ("cancel", "new", "status", "approve", "deny", "help")

HELP = """commands:
  /cancel        stop the running turn
  /new           start a fresh Codex session in this conversation
  /status        running or idle, queued messages, thread, token usage
  /approve [ID]  approve the oldest (or the given) pending request
  /deny [ID]     deny it
  /help          this list
anything else is sent to Codex"""


@dataclass(frozen=True, slots=True)
class Command:
    """A parsed command: its ``name`` (one of :data:`COMMANDS`, or what was typed) and its argument."""

    name: str
    argument: str = ""

    @property
    def known(self) -> bool:
        """Whether it is one of :data:`COMMANDS`."""
        return self.name in COMMANDS


def parse_command(text: str, prefix: str = "/") -> Command | None:
    """The command ``text`` is (``/approve r1``), or None when it is a message for Codex.

    Button actions are parsed with ``prefix=""``.
    """
    stripped = text.strip()
    if not stripped.startswith(prefix) or stripped == prefix:
        return None
    name, _, argument = stripped[len(prefix) :].partition(" ")
    return Command(name.lower(), argument.strip())


@dataclass
class ConversationState:
    """What an adapter has seen of a conversation, for ``status`` and default approvals."""

    running: bool = False
    queued: int = 0
    thread_id: str | None = None
    usage: object = None
    pending_approvals: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """The ``status`` reply."""
        usage = self.usage if self.usage is not None else "not reported"
        return (
            f"{'running' if self.running else 'idle'}; queued messages: {self.queued}; "
            f"thread: {self.thread_id or 'none yet'}; last turn's token usage: {usage}"
        )
