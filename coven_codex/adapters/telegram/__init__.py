"""The Telegram adapter (``pip install 'coven-codex[telegram]'``; docs/adapters.md, Telegram)."""
