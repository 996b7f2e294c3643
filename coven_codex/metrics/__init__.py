"""Prometheus metrics and health probes of one process (docs/operations.md, Metrics and health).

:mod:`~coven_codex.metrics.instruments` holds the instruments (one
:class:`~prometheus_client.CollectorRegistry` per :class:`~coven_codex.metrics.instruments.Instruments`,
never the library's global one, so nothing leaks between processes' parts or tests);
:mod:`~coven_codex.metrics.server` serves ``/metrics``, ``/healthz`` and ``/readyz`` on the opt-in
``metrics_port``.
"""
