"""Chat adapters: the shared kit (:mod:`coven_codex.adapters.kit`) and the adapters built on it.

An adapter is a journal client (docs/journal-protocol.md) running in its own process: it appends
``thought``/``cancel``/``reset``/``approval`` entries and renders what the daemon writes. Nothing
here imports the daemon's internals.
"""
