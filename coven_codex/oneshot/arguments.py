"""Codex's arguments for ``coven-codex exec``: passed through unchanged, with three exceptions.

- ``-C``/``--cd`` are refused: Codex always runs in the prepared workspace, whose trust entry,
  writable roots and ``AGENTS.md`` are made for it, so another directory would escape all three.
- ``--json`` is refused: in ``exec`` mode coven adds it itself (it reads the thread id from
  Codex's JSONL events to resume the same thread), and elsewhere Codex has no such flag.
- In ``exec`` mode (Codex's subcommand ``exec``, or its alias ``e``), ``--json`` is inserted right
  after the subcommand.

Options are told from positional arguments by Codex's own option table: :data:`VALUE_OPTIONS`
take a value (``-m m``, ``--model=m``, ``-mm``); everything after a bare ``--`` is positional.
Positional arguments (the prompt) are never inspected, so a prompt may say anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

EXEC_SUBCOMMANDS = frozenset({"exec", "e"})
VALUE_OPTIONS = frozenset(
    {
        "-c",
        "--config",
        "-m",
        "--model",
        "-p",
        "--profile",
        "-s",
        "--sandbox",
        "-a",
        "--ask-for-approval",
        "-i",
        "--image",
        "-C",
        "--cd",
        "--add-dir",
        "--enable",
        "--disable",
        "--local-provider",
        "--color",
        "--output-schema",
        "-o",
        "--output-last-message",
    }
)
REFUSED = {
    "-C": "Codex always runs in --workspace (its trust entry, writable roots and AGENTS.md are made for it); "
    "drop -C/--cd and pass the directory as --workspace",
    "--cd": "Codex always runs in --workspace (its trust entry, writable roots and AGENTS.md are made for it); "
    "drop -C/--cd and pass the directory as --workspace",
    "--json": "coven-codex exec adds --json itself in exec mode (it reads the thread id from Codex's events to "
    "resume the same thread); drop --json",
}


class ArgumentError(ValueError):
    """Codex's arguments contain something ``coven-codex exec`` refuses; the message says why."""


@dataclass(frozen=True, slots=True)
class CodexArguments:
    """Codex's arguments as given, split where ``coven-codex exec`` needs to know."""

    given: tuple[str, ...]
    exec_index: int | None
    """Where the ``exec`` subcommand is in ``given`` (``None``: not exec mode)."""
    exec_options: tuple[str, ...]
    """The options (with their values) between ``exec`` and its first positional argument."""

    @property
    def exec_mode(self) -> bool:
        """Whether Codex runs ``exec`` (non-interactive), which gets ``--json`` and the output-file retry."""
        return self.exec_index is not None

    def command(self) -> list[str]:
        """The arguments Codex gets: as given, plus ``--json`` after ``exec``."""
        if self.exec_index is None:
            return list(self.given)
        cut = self.exec_index + 1
        return [*self.given[:cut], "--json", *self.given[cut:]]

    def resume(self, thread_id: str | None, message: str) -> list[str]:
        """``exec --json <exec options> resume <thread_id> <message>`` (``--last`` without an id),
        with the options given before ``exec`` kept in front."""
        if self.exec_index is None:
            raise ArgumentError("only exec mode resumes a thread")
        target = [thread_id] if thread_id else ["--last"]
        head = self.given[: self.exec_index + 1]
        return [*head, "--json", *self.exec_options, "resume", *target, message]


def parse_codex_arguments(given: Sequence[str]) -> CodexArguments:
    """Check ``given`` (raise :class:`ArgumentError` for a refused flag) and find ``exec`` in it."""
    args = tuple(given)
    exec_index: int | None = None
    exec_options: list[str] = []
    index = 0
    seen_positional_after_exec = False
    while index < len(args):
        token = args[index]
        if token == "--":
            break
        if token.startswith("-") and token != "-":
            name, takes_value = _option(token)
            if name in REFUSED:
                raise ArgumentError(f"{name} is refused: {REFUSED[name]}")
            width = 2 if takes_value else 1
            if exec_index is not None and not seen_positional_after_exec:
                exec_options.extend(args[index : index + width])
            index += width
            continue
        if exec_index is None and token in EXEC_SUBCOMMANDS and not _positional_seen(args[:index]):
            exec_index = index
        elif exec_index is not None:
            seen_positional_after_exec = True
        index += 1
    return CodexArguments(given=args, exec_index=exec_index, exec_options=tuple(exec_options))


def _option(token: str) -> tuple[str, bool]:
    """The option's name, and whether its value is the next token."""
    if token.startswith("--"):
        name, has_value, _ = token.partition("=")
        return name, name in VALUE_OPTIONS and not has_value
    name = token[:2]
    return name, name in VALUE_OPTIONS and len(token) == 2


def _positional_seen(before: Sequence[str]) -> bool:
    index = 0
    while index < len(before):
        token = before[index]
        if not token.startswith("-") or token == "-":
            return True
        _, takes_value = _option(token)
        index += 2 if takes_value else 1
    return False
