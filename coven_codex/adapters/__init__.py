"""Chat adapters: programs that put the journal into a chat (the web page, ...)."""
