"""Where a process serves its metrics: the ``metrics_port``, ``metrics_host`` and ``metrics_allow``
settings (:class:`MetricsSettings`) of the daemon (``coven.toml``) and of each adapter's section
(``[adapters.NAME]``)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from pydantic import BaseModel, Field, field_validator

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


class MetricsSettings(BaseModel):
    """The ``metrics_port``, ``metrics_host`` and ``metrics_allow`` settings, and the options they make: a
    mixin of the daemon's :class:`~coven_codex.settings.Settings` and of every adapter's section."""

    metrics_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="Serve Prometheus /metrics, /healthz and /readyz on this port (0: any free port; "
        "docs/operations.md).",
    )
    metrics_host: str = Field(default="127.0.0.1", min_length=1, description="The address the metrics port listens on.")
    metrics_allow: list[str] = Field(
        default_factory=list,
        description="Networks (CIDR) besides loopback whose clients may use the metrics port.",
    )

    @field_validator("metrics_allow")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        parse_networks(value)
        return value

    @property
    def metrics(self) -> MetricsOptions | None:
        """The process's metrics port (docs/operations.md, Metrics and health); ``None`` when not set."""
        if self.metrics_port is None:
            return None
        return MetricsOptions(self.metrics_port, self.metrics_host, tuple(parse_networks(self.metrics_allow)))
