"""The console chat (``coven-codex chat``): the adapter kit on a terminal."""

from coven_codex.adapters.console.console import ConsoleChat, ConsolePlatform, stdin_lines

__all__ = ["ConsoleChat", "ConsolePlatform", "stdin_lines"]
