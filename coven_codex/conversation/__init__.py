"""The conversation core's task: one conversation's state machine and the parts its task owns.

Its face: :mod:`~coven_codex.conversation.manager` (``SessionManager``: a session per conversation,
created on its first thought, supervised) and :mod:`~coven_codex.conversation.phases` (the phases and
the transition table, drawn in ``docs/architecture.md``). A session (``session``) and its parts
(``admission``, ``handover``, ``ledger``, ``link``, ``outbox``, ``messages``) are inside: an
import-linter contract keeps them so. It stands on :mod:`coven_codex.agent` (ingress, egress, the
state log, slots) and is used by the daemon.
"""
