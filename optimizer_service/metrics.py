"""Every metric the project exposes, in one place, in the Prometheus format.

Names are ``p2_``-prefixed and carry their unit (``_seconds``, ``_bytes``,
``_total``); label sets are fixed and small (no op keys, no tensor sizes).
Built with ``prometheus-client``: nothing writes exposition text by hand.

Today the enforcer's ranks expose their counters through
:func:`enforcer_exposition` (``enforcer.metrics_text()``); the service's
metrics (iteration times, commits, replans) join this module with it.
This module is the one piece of the shell the enforcer may import: it imports
nothing of the optimizer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric


@dataclass(frozen=True)
class MetricSpec:
    """A metric's name (without the ``_total`` Prometheus adds to counters),
    its type, its help text and its labels."""

    name: str
    kind: str
    help: str
    labels: tuple[str, ...]

    def family(self, samples: Iterable[tuple[tuple[str, ...], float]]) -> Metric:
        if self.kind != "counter":
            raise ValueError(f"{self.name}: only counters are built here so far")
        family = CounterMetricFamily(self.name, self.help, labels=self.labels)
        for values, value in samples:
            family.add_metric(list(values), value)
        return family


ENFORCER_OPS = MetricSpec("p2_enforcer_ops", "counter",
                          "Comm-ops that entered the p2enforcer backend, by op kind.", ("rank", "kind"))
ENFORCER_BYPASSED = MetricSpec("p2_enforcer_bypassed", "counter",
                               "Comm-ops that reached an enforcer group's inner backend without the enforcer, by op.",
                               ("rank", "op"))
DISPATCH_WAIT = MetricSpec("p2_dispatch_wait_seconds", "counter",
                           "Time the enforcer's dispatcher waited for the next motif in plan order "
                           "(Syndicate Pseudocode 2).", ("rank",))

#: Every metric this module defines (the names a dashboard or an alert may use).
ALL: tuple[MetricSpec, ...] = (ENFORCER_OPS, ENFORCER_BYPASSED, DISPATCH_WAIT)


class _Snapshot:
    """A collector of families computed once (a rank's counters at one moment)."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> list[Metric]:
        return self._families


def exposition(families: list[Metric]) -> str:
    """``families`` in the Prometheus text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(families))
    return generate_latest(registry).decode()


def enforcer_exposition(rank: int, ops: Mapping[str, int], bypassed: Mapping[str, int],
                        wait_seconds: float) -> str:
    """One rank's enforcer counters: ops by kind, bypasses by op, dispatcher waits."""
    label = str(rank)
    return exposition([
        ENFORCER_OPS.family(((label, kind), count) for kind, count in sorted(ops.items())),
        ENFORCER_BYPASSED.family(((label, op), count) for op, count in sorted(bypassed.items())),
        DISPATCH_WAIT.family([((label,), wait_seconds)]),
    ])
