"""The instruments of one process, on a registry of its own.

Names follow the Prometheus conventions (https://prometheus.io/docs/practices/naming/): the
``coven_`` prefix, base units (seconds), ``_total`` on counters (the client adds it), and labels
with bounded values only: a turn's end status, an error code, a spell's name (the operator's
configured spells), a reader's role, a platform answer's class. A conversation's name is never a
label. Gauges that describe the daemon's state now (conversations, turns running, Codex
processes, journal lag) are read when scraped, through the ``refresh`` callbacks the process
registers, so nothing polls while nobody scrapes.
"""

from __future__ import annotations

import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from coven_codex.entries import BaseEntry, DeltaEntry, ErrorEntry, ResponseEntry, StatusEntry
from coven_codex.rollout.translator import TURN_END_STATES  # (another ``turn_*`` state is counted as ``other``)

NAMESPACE = "coven"
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
"""Seconds from a thought to its turn's start or first reply: a model answers within seconds to minutes."""
SPELL_BUCKETS = (0.005, 0.025, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0, 600.0)
MAX_TRACKED_THOUGHTS = 10_000
"""Thoughts whose arrival time is kept until their turn starts and first replies (oldest forgotten first)."""
MAX_ERROR_CODES = 64
"""Distinct ``code`` label values at most; later new codes are counted as ``OTHER`` (a bounded label)."""
_CODE = re.compile(r"^[A-Z][A-Z0-9_]{0,39}$")

Refresh = Callable[[], Awaitable[None]]
"""Brings scrape-time gauges up to date; awaited (bounded) before each scrape."""


Kind = Literal["counter", "gauge", "histogram"]


@dataclass(frozen=True, slots=True)
class Family:
    """One metric family of :class:`Instruments`: the attribute it is kept in, and how it is exported."""

    attribute: str
    name: str
    """Without the ``coven_`` namespace (and without ``_total`` for a counter: the client adds it)."""
    help: str
    labels: tuple[str, ...]
    kind: Kind
    buckets: tuple[float, ...] = ()
    """A histogram's buckets."""


FAMILIES: tuple[Family, ...] = (
    # conversations
    Family("conversations_live", "conversations_live", "Conversations the daemon has a session for.", (), "gauge"),
    Family(
        "conversations_waiting",
        "conversations_waiting_for_slot",
        "Conversations waiting for a max_sessions or max_jobs slot.",
        (),
        "gauge",
    ),
    Family("threads_loaded", "threads_loaded", "Conversations with a Codex thread open (a driver).", (), "gauge"),
    # thoughts and turns
    Family("thoughts_received", "thoughts_received", "Thoughts routed to a conversation.", (), "counter"),
    Family(
        "thoughts_handed_over", "thoughts_handed_over", "Thoughts handed over to Codex (each attempt).", (), "counter"
    ),
    Family("turns_running", "turns_running", "Codex turns running now.", (), "gauge"),
    Family("turns_started", "turns_started", "Turns started.", (), "counter"),
    Family("turns_ended", "turns_ended", "Turns ended, by end status.", ("status",), "counter"),
    Family("replies", "replies", "Reply (response) entries written.", (), "counter"),
    Family(
        "thought_to_turn_started",
        "thought_to_turn_started_seconds",
        "Seconds from a thought's arrival to its turn's start.",
        (),
        "histogram",
        LATENCY_BUCKETS,
    ),
    Family(
        "thought_to_first_reply",
        "thought_to_first_reply_seconds",
        "Seconds from a thought's arrival to the first reply text (delta or response) of its turn.",
        (),
        "histogram",
        LATENCY_BUCKETS,
    ),
    Family("errors", "errors", "Error entries written, by error code.", ("code",), "counter"),
    # Codex
    Family("codex_processes", "codex_processes", "Codex processes running (app-server pool).", (), "gauge"),
    Family("codex_restarts", "codex_restarts", "Codex processes that failed and are restarted.", (), "counter"),
    # spells
    Family("spell_calls", "spell_calls", "Spell calls, by spell and outcome.", ("spell", "outcome"), "counter"),
    Family(
        "spell_duration",
        "spell_call_duration_seconds",
        "Seconds a spell call took.",
        ("spell",),
        "histogram",
        SPELL_BUCKETS,
    ),
    # journal
    Family(
        "journal_lag_entries",
        "journal_lag_entries",
        "Entries after a reader's saved cursor (not yet finished by it), by reader.",
        ("reader",),
        "gauge",
    ),
    Family(
        "journal_lag_seconds",
        "journal_lag_seconds",
        "Age of the oldest entry after a reader's saved cursor (0: none), by reader.",
        ("reader",),
        "gauge",
    ),
    Family("journal_reachable", "journal_reachable", "1 when the journal answered the last probe.", (), "gauge"),
    Family(
        "journal_outages",
        "journal_outages",
        "Times the journal (e.g. its Redis) stopped answering probes.",
        (),
        "counter",
    ),
    # adapters
    Family(
        "ledger_intents_pending",
        "ledger_intents_pending",
        "Adapter deliveries written ahead and not yet confirmed.",
        (),
        "gauge",
    ),
    Family(
        "platform_answers",
        "platform_answers",
        "Chat platform answers to the adapter's calls, by class (ok, rate_limited, retried, refused).",
        ("answer_class",),
        "counter",
    ),
    Family(
        "platform_connected", "platform_connected", "1 while the adapter is connected to its platform.", (), "gauge"
    ),
    # cluster
    Family("leases_held", "leases_held", "Conversation leases this daemon holds (cluster).", (), "gauge"),
    Family(
        "leases_moved",
        "leases_moved",
        "Conversations that moved between daemons (cluster): in, taken over from another daemon; out, lost to one.",
        ("direction",),
        "counter",
    ),
    # the process
    Family(
        "event_loop_lag",
        "event_loop_lag_seconds",
        "Delay of a callback scheduled on the event loop, measured at the last scrape or probe.",
        (),
        "gauge",
    ),
)
"""Every metric family, in the order they are registered (docs/operations.md's table names each)."""


def build(family: Family, registry: CollectorRegistry) -> Counter | Gauge | Histogram:
    """``family``'s metric, registered on ``registry``."""
    if family.kind == "counter":
        return Counter(family.name, family.help, family.labels, namespace=NAMESPACE, registry=registry)
    if family.kind == "gauge":
        return Gauge(family.name, family.help, family.labels, namespace=NAMESPACE, registry=registry)
    return Histogram(
        family.name, family.help, family.labels, namespace=NAMESPACE, buckets=family.buckets, registry=registry
    )


class Instruments:
    """Every metric of one process. The daemon feeds the conversation and turn ones, adapters the
    platform ones; a family that a process never feeds is exported at zero (or not at all, for a
    labelled one), which says it does not apply."""

    conversations_live: Gauge
    conversations_waiting: Gauge
    threads_loaded: Gauge
    thoughts_received: Counter
    thoughts_handed_over: Counter
    turns_running: Gauge
    turns_started: Counter
    turns_ended: Counter
    replies: Counter
    thought_to_turn_started: Histogram
    thought_to_first_reply: Histogram
    errors: Counter
    codex_processes: Gauge
    codex_restarts: Counter
    spell_calls: Counter
    spell_duration: Histogram
    journal_lag_entries: Gauge
    journal_lag_seconds: Gauge
    journal_reachable: Gauge
    journal_outages: Counter
    ledger_intents_pending: Gauge
    platform_answers: Counter
    platform_connected: Gauge
    leases_held: Gauge
    leases_moved: Counter
    event_loop_lag: Gauge

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.refreshers: list[Refresh] = []
        for family in FAMILIES:  # (each attribute is typed above; a test holds the types to the kinds)
            setattr(self, family.attribute, build(family, r))
        self._arrived: OrderedDict[str, float] = OrderedDict()
        self._replied: set[str] = set()
        self._codes: set[str] = set()
        self._reachable = False

    # -- the daemon's hooks ------------------------------------------------------------------------
    def thought_received(self, thought_id: str) -> None:
        """A thought reached its conversation: its clock starts."""
        self.thoughts_received.inc()
        self._arrived[thought_id] = time.monotonic()
        self._arrived.move_to_end(thought_id)
        while len(self._arrived) > MAX_TRACKED_THOUGHTS:
            gone, _ = self._arrived.popitem(last=False)
            self._replied.discard(gone)

    def thought_handed_over(self) -> None:
        """A thought was written to Codex."""
        self.thoughts_handed_over.inc()

    def codex_failed(self) -> None:
        """A conversation's Codex failed and will be restarted."""
        self.codex_restarts.inc()

    def spell_called(self, spell: str, failed: bool, seconds: float) -> None:
        """A spell call ended (``failed``: its result is an error)."""
        self.spell_calls.labels(spell=spell, outcome="error" if failed else "ok").inc()
        self.spell_duration.labels(spell=spell).observe(seconds)

    def entry_appended(self, entry: BaseEntry) -> None:
        """The daemon wrote ``entry`` to the journal (egress and the session's own entries)."""
        thought = getattr(entry, "in_reply_to", None)
        if isinstance(entry, StatusEntry):
            if entry.state == "turn_started":
                self.turns_started.inc()
                self._observe(self.thought_to_turn_started, thought, forget=False)
            elif entry.state.startswith("turn_"):
                self.turns_ended.labels(status=entry.state if entry.state in TURN_END_STATES else "other").inc()
                if thought is not None:
                    self._arrived.pop(thought, None)
                    self._replied.discard(thought)
        elif isinstance(entry, ResponseEntry | DeltaEntry):
            if isinstance(entry, ResponseEntry):
                self.replies.inc()
            if thought is not None and thought not in self._replied and thought in self._arrived:
                self._replied.add(thought)
                self._observe(self.thought_to_first_reply, thought, forget=False)
        elif isinstance(entry, ErrorEntry):
            self.errors.labels(code=self._code_label(entry.code)).inc()

    def _code_label(self, code: str) -> str:
        if code in self._codes:
            return code
        if not _CODE.match(code) or len(self._codes) >= MAX_ERROR_CODES:
            return "OTHER"
        self._codes.add(code)
        return code

    def _observe(self, histogram: Histogram, thought: str | None, *, forget: bool) -> None:
        if thought is None:
            return
        start = self._arrived.pop(thought, None) if forget else self._arrived.get(thought)
        if start is not None:
            histogram.observe(time.monotonic() - start)

    def lease_moved(self, direction: Literal["in", "out"]) -> None:
        """A conversation moved to this daemon from another (``in``) or away from it (``out``)."""
        self.leases_moved.labels(direction=direction).inc()

    def journal_probed(self, reachable: bool) -> None:
        """The journal answered a probe, or did not (an outage begins when it stops answering)."""
        if self._reachable and not reachable:
            self.journal_outages.inc()
        self._reachable = reachable
        self.journal_reachable.set(1 if reachable else 0)
