"""The Discord adapter: Discord channels and threads as coven conversations (``pip install 'coven-codex[discord]'``)."""
