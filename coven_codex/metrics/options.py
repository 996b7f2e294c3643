"""Where a process serves its metrics: the ``metrics_port``, ``metrics_host`` and ``metrics_allow``
settings of the daemon (``coven.toml``) and of each adapter's section (``[adapters.NAME]``)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(texts: list[str]) -> list[Network]:
    """``metrics_allow`` as networks; :class:`ValueError` naming the first that is not one."""
    networks: list[Network] = []
    for text in texts:
        try:
            networks.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            raise ValueError(
                f"metrics_allow: {text!r} is not a network; write one as an address with a prefix "
                "length, e.g. 10.0.0.0/8 or 192.168.1.5/32"
            ) from None
    return networks


@dataclass(frozen=True, slots=True)
class MetricsOptions:
    """The metrics port of one process (docs/operations.md, Metrics and health)."""

    port: int
    host: str = "127.0.0.1"
    allow: tuple[Network, ...] = ()
