"""Counters the service keeps and its metrics read: plain data, no behaviour, no framework.

The transport counts what it refuses and how many streams are open; the Prometheus
collectors of :mod:`litehit_service.metrics` read them at scrape time. The types live here
so that neither side imports the other (metrics -> transport -> servicer -> metrics was a
circle): :mod:`~litehit_service.transport` fills a :class:`TransportStats`, and
:class:`StreamSource` is all that metrics knows of a transport.
"""

from __future__ import annotations

from collections.abc import Sized
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["StreamSource", "TransportStats"]


@dataclass
class TransportStats:
    """Counters the metrics collector reads at scrape time (cumulative)."""

    streams_rejected: int = 0
    streams_idle_closed: int = 0
    unauthenticated: dict[str, int] = field(default_factory=dict)
    undecodable: dict[str, int] = field(default_factory=dict)


class StreamSource(Protocol):
    """What the metrics read of a transport (:class:`~litehit_service.transport.Transport`
    is one): its cumulative :class:`TransportStats` and its open streams (their number)."""

    @property
    def stats(self) -> TransportStats: ...

    @property
    def streams(self) -> Sized: ...
