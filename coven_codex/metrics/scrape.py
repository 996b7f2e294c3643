"""Reading a ``/metrics`` page back: one GET, and the samples of its families (tests, benchmarks, tools)."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

SCRAPE_TIMEOUT = 10.0


async def get(base_url: str, path: str) -> tuple[int, str]:
    """``GET base_url + path``: the status and the body's text, within :data:`SCRAPE_TIMEOUT` seconds."""
    async with httpx.AsyncClient(timeout=SCRAPE_TIMEOUT, trust_env=False) as client:
        response = await client.get(base_url + path)
    return response.status_code, response.content.decode("utf-8", "replace")


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus text page, keyed by its name and its sorted labels."""
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(page: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    """The sample ``name`` with exactly ``labels`` (0 when absent: a labelled counter not yet moved)."""
    return page.get((name, tuple(sorted(labels.items()))), 0.0)


def total(page: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str) -> float:
    """The sum of ``name`` over all its label values."""
    return sum(v for (n, _), v in page.items() if n == name)
