"""The Redis keys of one cluster: every daemon serving one journal shares them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ClusterKeys:
    """Key names under ``coven:<namespace>:``; the namespace is the journal's name (its stream key)."""

    namespace: str

    @property
    def _base(self) -> str:
        return f"coven:{self.namespace}:"

    @property
    def daemons(self) -> str:
        """Sorted set: daemon id → when its heartbeat runs out (ms, Redis clock)."""
        return self._base + "daemons"

    @property
    def single_daemon(self) -> str:
        """The journal's ``NAME:daemon``: the hold of a daemon serving it without cluster (a cluster refuses
        to join while it is held, :mod:`coven_codex.journal.redis.holds`)."""
        return f"{self.namespace}:daemon"

    @property
    def expiry(self) -> str:
        """Sorted set: conversation → when its lease runs out (0: released)."""
        return self._base + "expiry"

    @property
    def handover(self) -> str:
        """Pub/sub channel: a daemon released leases (SIGTERM): the others look at once."""
        return self._base + "handover"

    def lease(self, conversation: str) -> str:
        """The lease: the fencing token of the holder, with a time to live."""
        return f"{self._base}lease:{conversation}"

    def holder(self, conversation: str) -> str:
        """The daemon id holding the lease (same time to live)."""
        return f"{self._base}holder:{conversation}"

    def counter(self, conversation: str) -> str:
        """The fencing-token counter (``INCR``): each claim gets a larger token."""
        return f"{self._base}token:{conversation}"

    def state(self, conversation: str) -> str:
        """Hash: the mirrored session state (``state``), its ``writer`` and ``token``."""
        return f"{self._base}state:{conversation}"

    def floor(self, conversation: str) -> str:
        """The journal position before which every thought of the conversation is finished."""
        return f"{self._base}floor:{conversation}"

    def rollout(self, conversation: str) -> str:
        """Hash: the mirrored rollout's ``thread`` and ``path`` (relative to ``CODEX_HOME``)."""
        return f"{self._base}rollout:{conversation}"

    def report(self, conversation: str, token: int | str) -> str:
        """List: rollouts previous owners report having on their own disk (see ``Mirror.report``) to the
        holder of fencing token ``token``: a report goes to whoever holds the lease when it is made, so
        a claimant that lost the lease meanwhile never takes one meant for the newer holder."""
        return f"{self._base}report:{conversation}:{token}"

    def reported(self, conversation: str, daemon_id: str) -> str:
        """The newest report ``daemon_id`` made of ``conversation`` (see ``Mirror.report``), kept for any
        later claimant: a report made to a holder that lost the lease before it finished adopting is
        still there for the next one (the list above is only the wake-up of the holder of its time)."""
        return f"{self._base}reported:{conversation}:{daemon_id}"

    def rollout_data(self, conversation: str) -> str:
        """The mirrored rollout's bytes, appended as Codex writes them."""
        return f"{self._base}rollout-data:{conversation}"
