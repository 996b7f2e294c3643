"""Jobs: Codex runs that any program can delegate through the journal (docs/jobs.md).

A job is the conversation ``job:<id>``; its record is derived from the journal
(:mod:`coven_codex.jobs.records`), and clients submit, cancel and wait through the journal only
(:mod:`coven_codex.jobs.client`). ``coven-codex job`` and ``coven-codex mcp-serve`` are such clients.
"""
