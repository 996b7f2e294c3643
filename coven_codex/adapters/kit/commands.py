"""The chat commands, the same on every platform (typed as ``/name`` or pressed as buttons).

- ``cancel``: stop the running turn;
- ``new``: start a fresh Codex session in this conversation (appends a ``reset`` entry);
- ``status``: running or idle, queued thoughts, thread id, token usage of the last turn;
- ``approve [ID]`` / ``deny [ID]``: answer an approval request (the oldest open one by default);
- ``approve-session [ID]``: approve it for the rest of the session (Codex does not ask again for the same);
- ``details [ID]``: the full output of a turn's tools (a progress card's **Details** button);
- ``resume [THREAD_OR_CONVERSATION]``: list the earlier threads this user may continue, or take one over
  (:mod:`coven_codex.adapters.kit.resume`);
- ``list``: the conversations the sender wrote in, the most recently active first;
- ``history [N]``: the last N exchanges (thought → reply) of this conversation;
- ``project [NAME]``, ``model [NAME]``, ``mode [NAME]``: choose the conversation's project directory, model or
  mode from what the daemon's operator allows (appends a ``settings`` entry; alone: what they are and may be);
- ``help``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from coven_codex.adapters.kit.render import clip
from coven_codex.entries import ConversationSettings, SettingsEntry, StatusEntry, TokenUsage

COMMANDS = (
    "cancel",
    "new",
    "status",
    "approve",
    "approve-session",
    "deny",
    "details",
    "resume",
    "list",
    "history",
    "project",
    "model",
    "mode",
    "help",
)
SETTINGS_COMMANDS = ("project", "model", "mode")
"""The commands that choose a conversation's settings (one ``settings`` entry each, the daemon checks it)."""
DECISIONS: dict[str, Literal["approve", "approve_for_session", "deny"]] = {
    "approve": "approve",
    "approve-session": "approve_for_session",
    "deny": "deny",
}
"""The journal's ``decision`` of each approval command."""

HELP = """commands:
  /cancel        stop the running turn
  /new           start a fresh Codex session in this conversation
  /status        running or idle, queued messages, thread, token usage
  /approve [ID]  approve the oldest (or the given) pending request
  /approve-session [ID]  approve it for the rest of the session (not asked again)
  /deny [ID]     deny it
  /details       the full output of the last turn's tools
  /resume [THREAD_OR_CONVERSATION]  list the earlier threads you can continue, or continue one here
  /list          the conversations you wrote in, the latest first
  /history [N]   the last N exchanges here (default 5, at most 20)
  /project [NAME]  work in one of the operator's projects (a new Codex thread); alone: list them
  /model [NAME]  use one of the operator's models from the next message; alone: list them
  /mode [NAME]   read-only, ask or auto (approvals and sandbox), as the operator allows; alone: list them
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

    Button actions are parsed with ``prefix=""``. ``_`` in a name is read as ``-``
    (``/approve_session``): Telegram's command menu allows no ``-`` in a command's name.
    """
    stripped = text.strip()
    if not stripped.startswith(prefix) or stripped == prefix:
        return None
    name, _, argument = stripped[len(prefix) :].partition(" ")
    return Command(name.lower().replace("_", "-"), argument.strip())


@dataclass
class ConversationState:
    """What an adapter has seen of a conversation, for ``status`` and default approvals."""

    running: bool = False
    queued: int = 0
    thread_id: str | None = None
    usage: TokenUsage | None = None
    """The ``usage`` of the last turn end that carried one."""
    pending_approvals: list[str] = field(default_factory=list)
    settings: ConversationSettings | None = None
    """The conversation's settings as the daemon's last ``settings`` status gave them (``None``: none seen)."""

    def describe(self) -> str:
        """The ``status`` reply."""
        usage = format_usage(self.usage) if self.usage is not None else "not reported"
        return (
            f"{'running' if self.running else 'idle'}; queued messages: {self.queued}; "
            f"thread: {self.thread_id or 'none yet'}; {describe_settings(self.settings)}; "
            f"last turn's token usage: {usage}"
        )

    def track_settings(self, entry: StatusEntry) -> None:
        """Keep the settings a daemon's ``settings`` status carries, and its thread (``None``: a new project's
        thread starts with the next message)."""
        if entry.state == SETTINGS_STATE and entry.settings is not None:
            self.settings = entry.settings
            self.thread_id = entry.thread_id


SETTINGS_STATE = "settings"
"""The daemon's answer to a ``settings`` entry (a ``status`` carrying the conversation's settings)."""


def describe_settings(settings: ConversationSettings | None) -> str:
    """The settings part of ``status``: project, model, mode (the daemon's defaults where none was chosen)."""
    if settings is None:
        return "settings: not seen here yet (the daemon says them next)"
    return (
        f"project: {settings.project or 'none (the workspace)'}; model: {settings.model or 'default'}; "
        f"mode: {settings.mode or 'default'}"
    )


def settings_sent(command: Command) -> str:
    """What the chat is told at once of a settings command (the daemon's answer follows)."""
    value = command.argument.strip()
    if not value:
        return f"asking the daemon for the {command.name} and the ones allowed; its answer follows"
    return f"{command.name} {clip(value, 80)} sent; the daemon's answer follows"


def settings_entry(command: Command, conversation: str, sender: str) -> SettingsEntry:
    """The ``settings`` entry a settings command appends (no argument: a question the daemon answers)."""
    value = command.argument.strip() or None
    return SettingsEntry(
        conversation=conversation,
        sender=sender,
        project=value if command.name == "project" else None,
        model=value if command.name == "model" else None,
        mode=value if command.name == "mode" else None,
    )


def format_usage(usage: TokenUsage) -> str:
    """``usage`` for people: ``"1,234 tokens (1,000 in, 200 of them cached; 234 out, 50 of them
    reasoning)"``; counts Codex did not report are left out (the total is the sum of input and
    output when Codex gives none)."""
    total = usage.total_tokens
    if total is None and usage.input_tokens is not None and usage.output_tokens is not None:
        total = usage.input_tokens + usage.output_tokens
    parts: list[str] = []
    for count, label, part, part_label in (
        (usage.input_tokens, "in", usage.cached_input_tokens, "cached"),
        (usage.output_tokens, "out", usage.reasoning_output_tokens, "reasoning"),
    ):
        if count is None:
            continue
        text = f"{count:,} {label}"
        if part is not None and part > 0:
            text += f", {part:,} of them {part_label}"
        parts.append(text)
    if total is None:
        return "; ".join(parts) if parts else "not reported"
    return f"{total:,} tokens ({'; '.join(parts)})" if parts else f"{total:,} tokens"
