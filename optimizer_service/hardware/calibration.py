"""Fit link latencies and bandwidths to measured collectives (``p2 calibrate``).

The simulator (:mod:`optimizer_service.hardware.cost_model`) predicts a step whose flows
cross one link class as ``t = a·α + b/β``: ``a`` latency rounds along the
slowest path, ``b`` bytes on the most loaded instance of the link, ``α`` and
``β`` the link's latency and bandwidth. So instead of fitting raw ping-pong
numbers, which would not say how the link behaves under the traffic programs
put on it, calibration runs **probes** — small complete reductions confined to
one link class — and fits ``(α, 1/β)`` of that link by least squares *through
the simulator itself*: ``a`` and ``b`` of every probe come from the cost model
with the link set to ``(1 s, ∞)`` and ``(0 s, 1 B/s)``. A calibrated model then
reproduces the probes as closely as its form allows, including effects no
datasheet has (TCP and gloo overheads, ranks sharing CPU cores on loopback,
the NIC shared by the ranks of a node).

Probes per link, at a small and a large size:

* over **one group** that crosses the link once per member (device 0 of every
  instance of the link's level) and over **all such groups at once** (the
  link instance shared by every device behind it, as in programs);
* as the inner backend's AllReduce, as ReduceScatter→AllGather and as
  Reduce→Broadcast (the executor's point-to-point algorithms), so the fit
  averages over the collectives programs use.

The fit minimises the *relative* error (the accuracy target is a MAPE), keeps
``α ≥ 0`` and needs ``β > 0``. A level served by several links of one channel
cannot be separated by probes and is left as it is (reported).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np

from optimizer_service.errors import InvalidInputError
from optimizer_service.hardware.cost_model import CostModel
from optimizer_service.hardware.topology import Link, Topology
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.lowered import LoweredProgram, LoweredStep

#: Probe sizes: the large one takes about ``LARGE_PROBE_SECONDS`` at the
#: link's nominal bandwidth (within bounds), the small one is an eighth of it.
#: Both are bandwidth-dominated on purpose: programs are chosen for large
#: reductions, and tiny probes mostly measure the shaper's burst allowance and
#: process wake-ups, which would skew the bandwidth the fit finds.
LARGE_PROBE_SECONDS = 0.25
LARGE_PROBE_BOUNDS = (1 << 20, 64 << 20)
SMALL_PROBE_FRACTION = 8
#: Fitted values are written with this many significant digits.
SIGNIFICANT_DIGITS = 4

_SHAPES = {
    "AllReduce": ((Collective.ALL_REDUCE,),),
    "ReduceScatter+AllGather": ((Collective.REDUCE_SCATTER,), (Collective.ALL_GATHER,)),
    "Reduce+Broadcast": ((Collective.REDUCE,), (Collective.BROADCAST,)),
}


@dataclass(frozen=True)
class Probe:
    """One measured reduction confined to ``link``."""

    link: str
    channel: int
    label: str
    program: LoweredProgram
    groups: tuple[tuple[int, ...], ...]
    nbytes: int


@dataclass(frozen=True)
class LinkFit:
    link: str
    latency: float
    bandwidth: float
    probes: int
    mape: float            # of the fitted model over this link's probes
    before: Link


def large_probe_bytes(link: Link) -> int:
    low, high = LARGE_PROBE_BOUNDS
    wanted = link.bandwidth * LARGE_PROBE_SECONDS
    return int(min(high, max(low, 2 ** round(math.log2(wanted)))))


def _level_groups(topology: Topology, level: int) -> list[tuple[int, ...]]:
    """Every group of devices that differ only in their index at ``level``."""
    span = topology.devices_per_instance(level)
    cardinality = topology.levels[level].cardinality
    outer = span * cardinality
    return [tuple(base + offset + i * span for i in range(cardinality))
            for base in range(0, topology.device_count, outer) for offset in range(span)]


def probes(topology: Topology, large_bytes: int | None = None) -> tuple[list[Probe], list[str]]:
    """The probes for every link that can be calibrated, and a note per link that
    cannot. ``large_bytes`` overrides the large probe size of every link."""
    found: list[Probe] = []
    notes: list[str] = []
    for link in topology.links:
        levels = [topology.level_index(name) for name in link.levels]
        usable = [j for j in levels if topology.levels[j].cardinality > 1]
        if not usable:
            notes.append(f"{link.name}: its level has one instance, so no traffic crosses it")
            continue
        level = usable[0]
        if len(topology.links_at(level, link.channel)) > 1 or link not in topology.links_at(level, link.channel):
            notes.append(f"{link.name}: shares level {topology.levels[level].name!r} with another link of "
                         f"channel {link.channel}; probes cannot tell them apart")
            continue
        every = _level_groups(topology, level)
        for shape, collectives in _SHAPES.items():
            spreads = [(every[:1], "one group")] + ([(every, f"{len(every)} groups")] if len(every) > 1 else [])
            for groups, spread in spreads:
                large = large_bytes or large_probe_bytes(link)
                for nbytes in (large // SMALL_PROBE_FRACTION, large):
                    steps = tuple(LoweredStep(c[0], tuple(groups), _input_fraction(c[0], len(groups[0])))
                                  for c in collectives)
                    found.append(Probe(link.name, link.channel, f"{link.name} {shape} {spread} {nbytes} B",
                                       LoweredProgram(steps), tuple(groups), nbytes))
    return found, notes


def _input_fraction(collective: Collective, p: int) -> Fraction:
    """What each member passes in: an AllGather after a ReduceScatter gathers 1/p parts."""
    return Fraction(1, p) if collective is Collective.ALL_GATHER else Fraction(1)


def _with_link(topology: Topology, name: str, **changes) -> Topology:
    links = tuple(replace(link, **changes) if link.name == name else link for link in topology.links)
    return replace(topology, links=links)


def coefficients(topology: Topology, probe: Probe) -> tuple[float, float]:
    """``(a, b)`` with predicted time ``a·latency + b/bandwidth`` for ``probe``."""
    latency_only = CostModel(_with_link(topology, probe.link, latency=1.0, bandwidth=1e300), channel=probe.channel)
    bytes_only = CostModel(_with_link(topology, probe.link, latency=0.0, bandwidth=1.0), channel=probe.channel)
    return (latency_only.program_seconds(probe.program, probe.nbytes),
            bytes_only.program_seconds(probe.program, probe.nbytes))


def fit(topology: Topology, measured: Sequence[tuple[Probe, float]]) -> tuple[Topology, list[LinkFit]]:
    """The topology with every probed link's latency and bandwidth fitted."""
    fits = []
    calibrated = topology
    for link in topology.links:
        mine = [(p, t) for p, t in measured if p.link == link.name]
        if not mine:
            continue
        if any(t <= 0 for _, t in mine):
            raise InvalidInputError(f"calibration of {link.name}: measured times must be > 0")
        coef = np.array([coefficients(topology, p) for p, _ in mine])
        times = np.array([t for _, t in mine])
        latency, inverse_bandwidth = _relative_least_squares(coef, times)
        if inverse_bandwidth <= 0:
            raise InvalidInputError(f"calibration of {link.name}: times do not grow with size "
                                    "(is the link really carrying the probes?)")
        latency, bandwidth = _round(latency), _round(1.0 / inverse_bandwidth)
        predicted = coef @ np.array([latency, 1.0 / bandwidth])
        fits.append(LinkFit(link.name, latency, bandwidth, len(mine),
                            float(np.mean(np.abs(predicted - times) / times)), link))
        calibrated = _with_link(calibrated, link.name, latency=latency, bandwidth=bandwidth)
    return calibrated, fits


def _round(value: float) -> float:
    if value == 0:
        return 0.0
    return float(f"{value:.{SIGNIFICANT_DIGITS}g}")


def _relative_least_squares(coef: np.ndarray, times: np.ndarray) -> tuple[float, float]:
    """argmin over (α ≥ 0, γ) of Σ ((a·α + b·γ − t) / t)²."""
    weighted = coef / times[:, None]
    ones = np.ones(len(times))
    (latency, inverse_bandwidth), *_ = np.linalg.lstsq(weighted, ones, rcond=None)
    if latency < 0:
        b = weighted[:, 1]
        latency, inverse_bandwidth = 0.0, float(b @ ones / (b @ b)) if b @ b > 0 else 0.0
    return float(latency), float(inverse_bandwidth)
