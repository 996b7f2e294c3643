"""coven-codex: a daemon that bridges a chat journal and the OpenAI Codex CLI."""

__version__ = "0.1.0"
