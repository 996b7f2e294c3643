"""The adapter kit: everything a chat adapter needs except the platform's own API calls.

- :mod:`~coven_codex.adapters.kit.platform`: the :class:`Platform` protocol an adapter implements
  (post/edit/delete/typing/find, incoming events) and the messages it exchanges;
- :mod:`~coven_codex.adapters.kit.mapping`: platform address ↔ conversation name;
- :mod:`~coven_codex.adapters.kit.access`: allow-lists and admin-only commands;
- :mod:`~coven_codex.adapters.kit.render`: entries → an intermediate representation → a dialect;
- :mod:`~coven_codex.adapters.kit.split`: long messages cut at the platform's limit;
- :mod:`~coven_codex.adapters.kit.streaming`: ``delta`` entries coalesced into rate-limited edits;
- :mod:`~coven_codex.adapters.kit.ledger`: the write-ahead delivery ledger (exactly-once posting);
- :mod:`~coven_codex.adapters.kit.commands`: cancel, new, status, approve/deny, help;
- :mod:`~coven_codex.adapters.kit.runner`: the loop tying them to a journal and a platform;
- :mod:`~coven_codex.adapters.kit.config`: the ``[adapters.<name>]`` sections of ``coven.toml`` and tokens.

See docs/adapters.md.
"""
