"""The cost model fitted to the job's own telemetry, online (issue 32, item 3; pure).

What the enforcer records of a running job (:mod:`optimizer_service.plan.trace`)
times every piece of communication: each planned motif (``motifs``: its
channel, start and seconds on every rank that ran it) and each op the inner
backend ran whole (``ops`` not ``enforced``: issued and completed on every
rank). :func:`fit_telemetry` turns the service's trace window into the
parameters the search prices with (Syndicate §4.2's physical plan, priced by
:class:`~optimizer_service.syndicate.motif_cost.MotifCostModel`), per channel
``c`` for the motifs that cross the network on it, and for the *host* — the
motifs that stay inside a node, whatever channel they name:

* ``motif_seconds``: the fixed cost of one motif (issuing it on the inner
  backend, handing it to a thread that waits for a core shared by every rank);
* ``latency``: how many times the calibrated latency of the channel's links
  (the host's: the links inside a node) one round of a collective takes
  (small-message latency; a ring of ``p`` ranks has ``2(p−1)`` rounds);
* ``rate``: the rate of those links (bytes moved and, inside a node, reduced
  on shared cores), as ``scale``, measured seconds per modelled second.

:mod:`optimizer_service.syndicate.refit` has the measurements this form comes
from and applies a fit to a topology; :meth:`TelemetryFit.motif_cost` prices
with it.

**Samples.** One timed piece of communication is one :class:`Sample`:
``measured`` is its time from the *last* rank's start to the last rank's end
(start and end on the ranks' trace clocks, ``started_unix`` + offset; the
ranks of one host share one clock, synchronised hosts agree to well under a
millisecond). That is what the scheduler prices: an op starts when its last
rank is ready (:mod:`optimizer_service.syndicate.trace_dag` reads every
compute as its slowest rank's) and the next compute waits for its end; a
rank's own motif time would also count its wait for slower peers, which the
DAG already has. ``latency`` and ``transfer`` are the calibrated model's
seconds for the same piece with every link's bandwidth unbounded and with
every latency 0 (the two terms of P²'s simulator,
:mod:`optimizer_service.hardware.cost_model`), no fixed cost. A motif is priced
with the motifs of its plan order that run with it on other ranks (the ∥
groups of one P² step share a NIC). An op the inner backend ran whole is
priced as its library default (option 0 of
:mod:`optimizer_service.syndicate.options`, ``motifs`` the motifs on its
longest chain: 2 for a ring all-reduce); ops of one group whose spans
overlap (gloo runs two at once) are one sample, their busy period, with
their motifs and modelled seconds summed. Nothing of no bytes is a sample:
both runtimes return from an empty motif at once.

**The fit** (:func:`fit_line`) of ``measured = motifs·motif_seconds +
latency_scale·latency + scale·transfer``: samples of one shape (motifs and
three significant digits of each modelled term: the same motif over the
window's iterations) keep their median, so one stalled iteration moves
nothing; the medians are fitted by least squares weighted by how many samples
each has, with non-negative terms, re-weighted (Huber, five rounds) so that a
shape far off the others counts less. Guards:

* fewer than :data:`MIN_SAMPLES` samples: the calibrated values stay
  (``fitted`` is empty);
* terms the shapes cannot tell apart (too few shapes, or shapes whose terms
  grow together: the weighted, normalised design's smallest singular value
  under :data:`SEPARABLE` of its largest) are not fitted: the latency first,
  then the fixed cost, keep their calibrated values and the rest is fitted;
* a fixed cost or latency the non-negative fit puts at 0 is the constraint
  binding, not a measurement: the live loop's second window (a running plan's
  few large network motifs) fitted channel 0 at 0 ms per motif and the search
  then priced small channel-0 motifs as free, committing a plan 56-64 % slower
  than it predicted. Such a term keeps its calibrated value, and a fixed cost
  is then shared (below) with the line's other terms fitted again around it;
* a fixed cost is at most the shortest time per motif that any shape of its
  line measured (:func:`fixed_cost_ceiling`: every motif pays it), a shared
  one too; a fit over it is fitted again with the fixed cost there
  (``capped``). Why: after the second NIC was slowed 4×, a DDP loop window
  measured channel 1's motifs of 131 KB at 70 ms and of 526 KB at 84 ms (its
  token bucket lets a motif's first 80 KB cross at line rate while the rest
  queue) and its latency-bound ones at 2.4 ms; the least squares put 38 ms
  on every motif and 2.9 times the rate, 16 times what the small motifs
  measured. Shared, that put 19.7 ms on each motif of channel 0 too (whose
  one shape had measured under its calibrated transfer), and the model
  priced the running plan 16 % over the window and the plan it chose 45 %
  over what it then measured. Capped, the same window fits channel 1 at
  2.4 ms a motif and 5.6 times the rate, shares 1.9 ms, and prices the
  running plan 12 % under the window. The other readings of a first window
  (:data:`RATE_AS_CALIBRATED`, :data:`PER_MOTIF`) are not capped: they are
  the pessimistic "all of it per motif" the search guards against, not a
  measurement;
* a link is never fitted faster than calibrated (``scale >= 1``: the term is
  fitted as its excess over the calibrated rate, which is the rate measured
  by ``p2 calibrate``'s probes on a quiet host or the NIC's shaped rate; a job
  only slows it, and where the fixed cost and the rate trade off against each
  other, as a ring's rounds and its bytes do, a rate above the NIC's was the
  fit's artefact: 38 and 43 MB/s for 25 MB/s NICs);
* ``scale`` is clamped to at most :data:`MAX_SCALE`, the fixed cost to
  [0, :data:`MAX_MOTIF_SECONDS`] and the latency to
  [0, :data:`MAX_LATENCY_SCALE`] times calibrated, so one odd window cannot
  move the model by more than that.

**Pooling.** Every window of one cluster state measures the same cluster, under
different plans, and the next search must not forget what an earlier one
measured: the service keeps each search's fit for the cluster state (and, when
a plan is rolled back, the fit of what that plan measured), and each line
keeps the shapes it was fitted from (``shapes``: its own first, at most
:data:`MAX_SHAPES`). The next window's fit pools its own shapes with those,
each weighted by its count. Why: passthrough runs every op whole, one at a
time, so its window's shapes cannot tell a motif's fixed cost from a ring's
slow rounds; the FSDP2 loop's first plan, eight segments of every op on two
channels, measured 16 ms per motif where passthrough's window had fitted
1 ms, and was rolled back; the search after it fitted passthrough's next
window alone, priced the segments at 1 ms again and committed a plan 45 %
slower than passthrough. Pooled, the rolled-back plan's segments keep
counting until the cluster state changes.

Our reading of what the job cannot say: a channel with no samples of its own
(passthrough uses channel 0 only) is fitted from the earlier windows' shapes
alone, if they have enough (``earlier``: a plan rolled back to passthrough has
left its motif times there, and the next search must not forget that a NIC
was measured slow); else it keeps its calibrated rate and latency and takes
the median fixed cost of the channels and host that were fitted
(``shared``): the fixed cost is the host's (issuing, waking threads), not the
NIC's, and pricing an unmeasured channel's motifs at the calibrated
microseconds would send traffic to it for no measured reason. The host's fixed
cost, unmeasured (a job with no collective inside a node runs none in
passthrough), is shared the same way. So is the time of one round
(``round_shared``): such a line takes the median time per round of the lines
that fitted their latency, for the same reason.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from optimizer_service.hardware.topology import Topology
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.dtypes import DTYPE_BYTES, element_bytes
from optimizer_service.plan.motif import Motif, comm_op
from optimizer_service.plan.plan import Plan
from optimizer_service.plan.trace import COMM_KINDS
from optimizer_service.syndicate.library_ops import library_op, reduce_scatter_by_all_reduce
from optimizer_service.syndicate.motif_cost import DEFAULT_DISPATCH_SECONDS, MotifCostModel, crosses_nodes
from optimizer_service.syndicate.options import library_option
from optimizer_service.syndicate.problem import template_of

#: Samples a channel (or the host) needs before its values are fitted.
MIN_SAMPLES = 8
#: Terms are told apart when the design's smallest singular value is at least this share of its largest.
SEPARABLE = 0.02
#: Upper bounds of the fitted scale (measured per modelled second of bytes; its lower bound is 1:
#: module docstring), fixed cost and latency factor.
MAX_SCALE = 16.0
MAX_MOTIF_SECONDS = 0.1
MAX_LATENCY_SCALE = 1000.0
#: Significant digits of a sample's modelled terms that name its shape.
SHAPE_DIGITS = 3
#: Shapes a line keeps for the next window of its cluster state to fit with (its own first).
MAX_SHAPES = 24
#: Huber re-weighting rounds of the fit, and its tuning constant (in robust standard deviations).
ROBUST_ROUNDS, HUBER = 5, 1.345
#: The fit's terms, in the order they are given up when the data cannot tell them apart (last first).
TERMS = ("rate", "motif_seconds", "latency")


@dataclass(frozen=True)
class Sample:
    """One timed piece of communication (module docstring): ``channel`` is the
    channel whose NIC it crossed, None when it stayed inside a node."""

    channel: int | None
    motifs: int
    latency: float
    transfer: float
    measured: float


#: One shape of samples: (motifs, latency, transfer, measured, count), medians but the count.
Shape = tuple[int, float, float, float, int]


@dataclass(frozen=True)
class Line:
    """``measured ≈ motifs·motif_seconds + latency_scale·latency + scale·transfer``
    for one channel or the host; ``fitted``: the terms (of :data:`TERMS`) the data
    set, ``shared``: the fixed cost is the median of the fitted ones, ``round_shared``:
    one round takes the median fitted time per round, ``earlier``: the values come
    from an earlier window of the same cluster state (module docstring)."""

    motif_seconds: float
    latency_scale: float
    scale: float
    samples: int
    fitted: tuple[str, ...] = ()
    shared: bool = False
    earlier: bool = False
    #: what the line was fitted from, for the next window to fit with: (motifs, latency, transfer,
    #: measured, count) per shape, the medians of its samples (module docstring, "Pooling")
    shapes: tuple[Shape, ...] = ()
    round_shared: bool = False
    #: the fixed cost is the line's ceiling (:func:`fixed_cost_ceiling`), the fit's or the shared one was over it
    capped: bool = False

    @property
    def how(self) -> str:
        parts = ([t for t in self.fitted if not (self.capped and t == "motif_seconds")]
                 + (["motif_seconds shared"] if self.shared else [])
                 + (["latency shared"] if self.round_shared else [])
                 + (["motif_seconds at the fastest motif"] if self.capped else []))
        text = ", ".join(parts) if parts else "calibrated"
        return f"{text} (an earlier window)" if self.earlier else text

    def to_dict(self) -> dict:
        return {"motif_seconds": self.motif_seconds, "latency_scale": self.latency_scale, "scale": self.scale,
                "samples": self.samples, "fitted": list(self.fitted), "shared": self.shared, "earlier": self.earlier,
                "round_shared": self.round_shared, "capped": self.capped, "how": self.how,
                "shapes": [list(shape) for shape in self.shapes]}

    @classmethod
    def from_dict(cls, data: Mapping) -> Line:
        fitted = tuple(str(t) for t in data.get("fitted", ()) if t in TERMS)
        return cls(float(data["motif_seconds"]), float(data["latency_scale"]), float(data["scale"]),
                   int(data.get("samples", 0)), fitted, bool(data.get("shared", False)), bool(data.get("earlier")),
                   _read_shapes(data.get("shapes")), bool(data.get("round_shared", False)),
                   bool(data.get("capped", False)))


@dataclass(frozen=True)
class TelemetryFit:
    """The fitted parameters of every channel and of the host, over the calibrated
    ``motif_seconds`` they replace."""

    channels: Mapping[int, Line]
    host: Line
    calibrated_motif_seconds: float = DEFAULT_DISPATCH_SECONDS

    @property
    def samples(self) -> int:
        return sum(line.samples for line in self.channels.values()) + self.host.samples

    def motif_cost(self, topology: Topology) -> MotifCostModel:
        """The cost model of ``topology`` (already :func:`~optimizer_service.syndicate.refit.refit`
        to the fitted rates and latencies) with the fitted fixed costs."""
        return MotifCostModel(topology, dispatch_seconds=self.calibrated_motif_seconds,
                              channel_dispatch={c: line.motif_seconds for c, line in self.channels.items()},
                              host_dispatch=self.host.motif_seconds)

    def parameters(self) -> list[str]:
        """The parameters that differ from their calibrated values, as ``WHERE TERM``:
        WHERE ``channel C`` or ``host``, TERM one of :data:`TERMS`."""
        found = []
        for where, line in self._lines():
            for term, value, calibrated in (("motif_seconds", line.motif_seconds, self.calibrated_motif_seconds),
                                            ("latency", line.latency_scale, 1.0), ("rate", line.scale, 1.0)):
                if value != calibrated:
                    found.append(f"{where} {term}")
        return found

    def without(self, parameter: str) -> TelemetryFit:
        """This fit with one parameter (a name :meth:`parameters` gives) at its calibrated value."""
        where, term = parameter.rsplit(" ", 1)
        reset = {"motif_seconds": {"motif_seconds": self.calibrated_motif_seconds},
                 "latency": {"latency_scale": 1.0}, "rate": {"scale": 1.0}}[term]
        if where == "host":
            return replace(self, host=replace(self.host, **reset))
        channel = int(where.split()[1])
        return replace(self, channels={**self.channels, channel: replace(self.channels[channel], **reset)})

    def contended(self, factor: float) -> TelemetryFit:
        """This fit with every fixed cost per motif ``factor`` times as long: the host's
        cores busier (or idler) than in the window the fit comes from
        (:mod:`optimizer_service.syndicate.host_contention`)."""
        return replace(self, channels={c: replace(line, motif_seconds=line.motif_seconds * factor)
                                       for c, line in self.channels.items()},
                       host=replace(self.host, motif_seconds=self.host.motif_seconds * factor),
                       calibrated_motif_seconds=self.calibrated_motif_seconds * factor)

    def _lines(self) -> list[tuple[str, Line]]:
        return [(f"channel {c}", line) for c, line in sorted(self.channels.items())] + [("host", self.host)]

    def to_dict(self, calibrated: Topology) -> dict:
        """``{"channels": {"C": ENTRY}, "host": ENTRY, "host_motif_seconds", "calibrated_motif_seconds"}``,
        ENTRY ``{motif_seconds, rate_bytes_per_s, round_seconds, samples, how, scale, latency_scale,
        calibrated_rate_bytes_per_s, calibrated_round_seconds}``: the rate of the links the values apply
        to (the slowest, None without such links) and the latency of one round over them, and the
        line's own fields (``fitted``, ``shared``, ``earlier``: :meth:`Line.to_dict`)."""
        def entry(line: Line, links: Sequence) -> dict:
            rate = min((link.bandwidth for link in links), default=None)
            latency = max((link.latency for link in links), default=None)
            return {**line.to_dict(), "rate_bytes_per_s": None if rate is None else rate / line.scale,
                    "calibrated_rate_bytes_per_s": rate,
                    "round_seconds": None if latency is None else latency * line.latency_scale,
                    "calibrated_round_seconds": latency}

        channels = {str(c): entry(line, nic_links(calibrated, c)) for c, line in sorted(self.channels.items())}
        return {"channels": channels,
                "host": entry(self.host, host_links(calibrated)), "host_motif_seconds": self.host.motif_seconds,
                "calibrated_motif_seconds": self.calibrated_motif_seconds}


    @classmethod
    def from_dict(cls, data: Mapping) -> TelemetryFit:
        """A fit :meth:`to_dict` wrote (the service keeps it between searches)."""
        return cls({int(c): Line.from_dict(entry) for c, entry in data["channels"].items()},
                   Line.from_dict(data["host"]), float(data["calibrated_motif_seconds"]))


def nic_links(topology: Topology, channel: int) -> tuple:
    """The links of channel ``channel`` that its traffic between nodes crosses."""
    return tuple(link for link in topology.links_at(0, channel) if link.channel == channel)


def calibrated_rounds(topology: Topology) -> dict[int | None, float]:
    """The calibrated latency of one round per line (channel, None for the host): its slowest
    link's; lines without links are left out."""
    rounds = {c: max((link.latency for link in nic_links(topology, c)), default=0.0) for c in topology.channels}
    rounds[None] = max((link.latency for link in host_links(topology)), default=0.0)
    return {key: seconds for key, seconds in rounds.items() if seconds > 0}


def host_links(topology: Topology) -> tuple:
    """The links inside a node (none on a one-level topology: every link joins nodes)."""
    if len(topology.levels) < 2:
        return ()
    outer = topology.levels[0].name
    return tuple(link for link in topology.links if outer not in link.levels)


# ----------------------------------------------------------------------- the fit
def fit_line(samples: Sequence[Sample], calibrated_motif_seconds: float = DEFAULT_DISPATCH_SECONDS,
             fixed: Mapping[str, float] | None = None, earlier: Sequence[Shape] = (), capped: bool = True) -> Line:
    """The robust fit of one channel's (or the host's) samples, pooled with the
    ``earlier`` shapes of its cluster state (module docstring); ``fixed`` gives
    terms their values instead of fitting them. A fixed cost or latency the
    non-negative fit puts at 0 is its constraint, not a measurement: the line is
    fitted again with that term at its calibrated value and the term is not
    counted as fitted (:func:`fit_samples` then shares the fixed cost). ``capped``: the
    fixed cost is at most :func:`fixed_cost_ceiling` of the shapes (the fit proper; a
    reading that gives terms their calibrated values is not capped)."""
    usable = [s for s in samples if s.motifs > 0 and s.latency + s.transfer > 0 and s.measured >= 0]
    own = _shapes(usable)
    pooled = own + list(earlier)
    kept = tuple(own[:MAX_SHAPES]) + tuple(sorted(earlier, key=lambda shape: -shape[4]))[:max(0, MAX_SHAPES - len(own))]
    if sum(shape[4] for shape in pooled) < MIN_SAMPLES:
        return Line(calibrated_motif_seconds, 1.0, 1.0, len(usable), shapes=kept)
    rows = np.array([shape[:3] for shape in pooled], dtype=float)
    measured = np.array([shape[3] for shape in pooled], dtype=float)
    counts = np.array([shape[4] for shape in pooled], dtype=float)
    defaults = {"motif_seconds": calibrated_motif_seconds, "latency": 1.0, "rate": 1.0, **(fixed or {})}
    column = {"motif_seconds": 0, "latency": 1, "rate": 2}
    terms = tuple(t for t in TERMS if t not in (fixed or {}))
    for fitted in (terms[:3], terms[:2], terms[:1]):
        free = [column[t] for t in fitted]
        if fitted and _separable(rows[:, free], counts):
            break
    else:
        return Line(defaults["motif_seconds"], defaults["latency"], 1.0, len(usable), shapes=kept)
    # The rate's term is fitted as its excess over the calibrated rate (scale = 1 + excess, excess >= 0).
    known = rows[:, column["rate"]] + sum(rows[:, column[t]] * defaults[t] for t in TERMS
                                          if t not in fitted and t != "rate")
    coef = dict(zip(fitted, _robust_nonnegative(rows[:, free], measured - known, counts)))
    at_zero = {t: defaults[t] for t in ("motif_seconds", "latency") if t in coef and coef[t] <= 0}
    if at_zero:
        line = fit_line(samples, calibrated_motif_seconds, {**(fixed or {}), **at_zero}, earlier, capped)
        return replace(line, fitted=tuple(t for t in line.fitted if t not in at_zero))
    ceiling = fixed_cost_ceiling(pooled) if capped else math.inf
    if coef.get("motif_seconds", 0.0) > ceiling:        # over what a motif of the line measured: at the ceiling
        line = fit_line(samples, calibrated_motif_seconds, {**(fixed or {}), "motif_seconds": ceiling}, earlier)
        return replace(line, fitted=tuple(t for t in TERMS if t in line.fitted or t == "motif_seconds"),
                       capped=True)
    values = {**defaults, **coef, "rate": 1.0 + coef.get("rate", 0.0)}
    return Line(_clamp(values["motif_seconds"], 0.0, MAX_MOTIF_SECONDS),
                _clamp(values["latency"], 0.0, MAX_LATENCY_SCALE), _clamp(values["rate"], 1.0, MAX_SCALE),
                len(usable), tuple(t for t in TERMS if t in fitted), shapes=kept)


def fixed_cost_ceiling(shapes: Sequence[Shape]) -> float:
    """The most a line's fixed cost per motif can be: every motif pays it, so no more than
    the shortest time per motif that any of its shapes measured (infinite without shapes)."""
    return min((shape[3] / shape[0] for shape in shapes), default=math.inf)


def _shapes(samples: Sequence[Sample]) -> list[Shape]:
    """The samples grouped by shape (motifs and three significant digits of each
    modelled term), each with its median terms, median measured time and count,
    the most common first."""
    groups: dict[tuple, list[Sample]] = {}
    for s in samples:
        groups.setdefault((s.motifs, f"{s.latency:.{SHAPE_DIGITS}g}", f"{s.transfer:.{SHAPE_DIGITS}g}"), []).append(s)
    shapes = [(group[0].motifs, statistics.median(s.latency for s in group),
               statistics.median(s.transfer for s in group), statistics.median(s.measured for s in group), len(group))
              for group in groups.values()]
    return sorted(shapes, key=lambda shape: -shape[4])


def _read_shapes(data: object) -> tuple[Shape, ...]:
    """The shapes a :meth:`Line.to_dict` wrote; anything else is left out (at most :data:`MAX_SHAPES`)."""
    if not isinstance(data, list):
        return ()
    shapes = []
    for item in data[:MAX_SHAPES]:
        try:
            motifs, latency, transfer, measured, count = item
            shape = (int(motifs), float(latency), float(transfer), float(measured), int(count))
        except (TypeError, ValueError):
            continue
        if (shape[0] > 0 and shape[4] > 0 and all(math.isfinite(v) and v >= 0 for v in shape[1:4])
                and shape[1] + shape[2] > 0):
            shapes.append(shape)
    return tuple(shapes)


def _separable(design: np.ndarray, weights: np.ndarray) -> bool:
    """Whether the columns of ``design`` (one row per shape) can be told apart."""
    if design.shape[0] < design.shape[1]:
        return False
    weighted = design * np.sqrt(weights)[:, None]
    norms = np.linalg.norm(weighted, axis=0)
    if (norms <= 0).any():
        return False
    singular = np.linalg.svd(weighted / norms, compute_uv=False)
    return bool(singular[-1] >= SEPARABLE * singular[0])


def _nonnegative(design: np.ndarray, target: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Weighted least squares with every coefficient >= 0 (every subset of the few
    columns tried; the best feasible one)."""
    root = np.sqrt(weights)
    a, b = design * root[:, None], target * root
    best, best_error = np.zeros(design.shape[1]), float(b @ b)
    for size in range(1, design.shape[1] + 1):
        for subset in itertools.combinations(range(design.shape[1]), size):
            solved, *_ = np.linalg.lstsq(a[:, subset], b, rcond=None)
            if (solved < 0).any():
                continue
            coef = np.zeros(design.shape[1])
            coef[list(subset)] = solved
            error = float(np.sum((a @ coef - b) ** 2))
            if error < best_error - 1e-18:
                best, best_error = coef, error
    return best


def _robust_nonnegative(design: np.ndarray, target: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """:func:`_nonnegative`, Huber re-weighted (module docstring)."""
    weights = counts
    coef = _nonnegative(design, target, weights)
    for _ in range(ROBUST_ROUNDS):
        residual = target - design @ coef
        spread = 1.4826 * float(np.median(np.abs(residual - np.median(residual))))
        if spread <= 0:
            break
        limit = HUBER * spread
        weights = counts * np.minimum(1.0, limit / np.maximum(np.abs(residual), 1e-300))
        coef = _nonnegative(design, target, weights)
    return coef


def _clamp(value: float, low: float, high: float) -> float:
    return float(min(high, max(low, value)))


def fit_samples(samples: Sequence[Sample], channels: Sequence[int],
                calibrated_motif_seconds: float = DEFAULT_DISPATCH_SECONDS,
                prior: TelemetryFit | None = None, given: Mapping[str, float] | None = None,
                rounds: Mapping[int | None, float] | None = None) -> TelemetryFit:
    """Fit every channel of ``channels`` and the host to this window's samples
    pooled with what ``prior`` (an earlier window of the same cluster state) was
    fitted from; a line neither can fit takes ``prior``'s values where that
    fitted any, and the fixed cost is shared where nothing did (module docstring).
    ``given``: terms every line takes at these values instead of fitting them
    (:data:`RATE_AS_CALIBRATED`); ``rounds``: each line's calibrated time per
    round (:func:`calibrated_rounds`), with which a line that fitted nothing
    takes the median fitted time per round (:func:`_share_rounds`)."""
    before = prior.channels if prior is not None else {}
    before_host = prior.host if prior is not None else None
    capped = not given          # the fit proper; a reading's lines are not capped (module docstring)

    def pooled(own: Sequence[Sample], earlier: Line | None, fixed: Mapping[str, float] | None = None) -> Line:
        return fit_line(own, calibrated_motif_seconds, {**(given or {}), **(fixed or {})} or None,
                        earlier.shapes if earlier is not None else (), capped=capped)

    def fit(own: Sequence[Sample], earlier: Line | None) -> Line:
        line = pooled(own, earlier)
        if earlier is None or not earlier.fitted:
            return line
        if not line.fitted:         # a prior without shapes (written before pooling), or too few of them
            return replace(earlier, samples=line.samples, shared=False, earlier=True, shapes=line.shapes)
        if line.samples < MIN_SAMPLES and earlier.shapes:     # fitted from the earlier window's shapes
            return replace(line, earlier=True)
        return line

    own = {c: [s for s in samples if s.channel == c] for c in channels}
    host_own = [s for s in samples if s.channel is None]
    lines = {c: fit(own[c], before.get(c)) for c in channels}
    host = fit(host_own, before_host)
    fitted = [line.motif_seconds for line in (*lines.values(), host) if "motif_seconds" in line.fitted]
    if fitted:
        shared = statistics.median(fitted)

        def share(line: Line, own: Sequence[Sample], earlier: Line | None) -> Line:
            if "motif_seconds" in line.fitted:
                return line
            value = min(shared, fixed_cost_ceiling(line.shapes)) if capped else shared
            over = value < shared       # never over what a motif of the line measured
            if line.fitted:     # its other terms measured: fitted again around the shared fixed cost
                refit = pooled(own, earlier, {"motif_seconds": value})
                if refit.fitted:
                    return replace(refit, fitted=tuple(t for t in refit.fitted if t != "motif_seconds"),
                                   shared=True, earlier=line.earlier, capped=over)
            return replace(line, motif_seconds=value, shared=True, capped=over)

        lines = {c: share(line, own[c], before.get(c)) for c, line in lines.items()}
        host = share(host, host_own, before_host)
    if rounds:
        lines, host = _share_rounds(lines, host, rounds)
    return TelemetryFit(lines, host, calibrated_motif_seconds)


def _share_rounds(lines: Mapping[int, Line], host: Line,
                  rounds: Mapping[int | None, float]) -> tuple[dict[int, Line], Line]:
    """A line that fitted nothing, from this window or an earlier one, takes the
    median time per round of the lines that fitted their latency, in seconds, as
    its latency (never under its calibrated one). Our reading, from DLRM's loop
    records (``benchmarks/extrapolation.py``): what a round costs beyond the link's
    latency on this host is waking a rank's thread on cores every rank shares, as
    the fixed cost is, not the link; passthrough's window measured channel 0's
    round at 9× calibrated, and a first plan priced with channel 1's and the
    host's rounds at their calibrated microseconds was predicted 25 % faster
    than it ran."""
    keyed: dict[int | None, Line] = {**lines, None: host}
    measured = [line.latency_scale * rounds[key] for key, line in keyed.items()
                if "latency" in line.fitted and rounds.get(key)]
    if not measured:
        return dict(lines), host
    per_round = statistics.median(measured)

    def share(key: int | None, line: Line) -> Line:
        if line.fitted or line.earlier or not rounds.get(key):
            return line
        return replace(line, latency_scale=_clamp(per_round / rounds[key], 1.0, MAX_LATENCY_SCALE),
                       round_shared=True)

    return {c: share(c, line) for c, line in lines.items()}, share(None, host)


def fit_telemetry(topology: Topology, traces: Sequence[Mapping], plan: Plan | None = None,
                  prior: TelemetryFit | None = None, given: Mapping[str, float] | None = None) -> TelemetryFit:
    """The fit of ``topology``'s channels and host to a trace window: the running
    ``plan``'s motif records (if one runs) and every op the inner backend ran whole;
    ``prior``: the fit of an earlier window of the same cluster state; ``given``:
    terms not fitted (:func:`fit_samples`)."""
    samples = passthrough_samples(topology, traces)
    if plan is not None and plan.ops:
        samples += motif_samples(topology, plan, traces)
    return fit_samples(samples, topology.channels, prior=prior, given=given, rounds=calibrated_rounds(topology))


def values_only(fit: Mapping) -> dict:
    """A kept fit (:meth:`TelemetryFit.to_dict`) without what its lines were fitted from: as a prior
    it gives its values to the lines a window cannot fit and pools nothing with those it can (a
    drift state's searches, :mod:`optimizer_service.service.replanning`)."""
    def bare(entry: Mapping) -> dict:
        return {**entry, "shapes": []}

    return {**fit, "channels": {c: bare(entry) for c, entry in fit["channels"].items()}, "host": bare(fit["host"])}


def fit_readings(topology: Topology, samples: Sequence[Sample],
                 givens: Sequence[Mapping[str, float] | None]) -> list[TelemetryFit]:
    """A window of whole ops only (no plan ran in it, no earlier fit of its cluster state),
    its :func:`passthrough_samples`, fitted once per entry of ``givens``
    (:func:`fit_telemetry`'s ``given``: None fits every term)."""
    rounds = calibrated_rounds(topology)
    return [fit_samples(samples, topology.channels, given=given, rounds=rounds) for given in givens]


def slowest_round_reading(topology: Topology, samples: Sequence[Sample],
                          calibrated_motif_seconds: float = DEFAULT_DISPATCH_SECONDS) -> TelemetryFit | None:
    """The fourth reading of a window of whole ops, its :func:`passthrough_samples`
    (:func:`optimizer_service.syndicate.live_search.live_search`):
    every link at its calibrated rate, every motif at the calibrated fixed cost, and every round of
    every line at the slowest time per round that a latency-bound op of the window measured: what it
    took beyond its bytes and fixed cost, over its rounds, for the shapes (seen at least twice) whose
    calibrated time is more rounds than bytes and whose motifs take more than one round each (rings
    and trees, whose rounds follow one another). None where the window has no such op.

    Why: a latency-bound op (DLRM's 4-byte loss over eight ranks, 14 rounds) measured 2 ms a round
    where the large ops, whose rounds overlap their bytes, make the fit's least squares say 1 ms; a
    flat ring over eight ranks of 263 KB then measured 23 ms against the fit's 16 ms, and the search,
    pricing its rival (reduce-scatter inside each node, four pairs across) no lower, committed the
    ring: 0.23 s against 0.19 s for the other plan, in turns on one cluster. Why only latency-bound
    ops: what an all-to-all takes beyond its bytes (one round, eight flows into every node at once)
    is not its round's; read as one, it priced every round at 12 ms, and on one node (where a
    round's calibrated 20 µs exceeds a small all-to-all's bytes) at 4 ms, its fixed cost. A DDP
    window whose 4-byte op ran beside the others (one sample) has no fourth reading."""
    rounds = calibrated_rounds(topology)
    slowest = None
    for sample_channel, shapes in _line_shapes(samples).items():
        per_round = rounds.get(sample_channel)
        if not per_round:
            continue
        for motifs, latency, transfer, measured, count in shapes:
            op_rounds = latency / per_round
            if count >= 2 and latency > transfer and op_rounds > motifs:
                beyond = (measured - transfer - motifs * calibrated_motif_seconds) / op_rounds
                slowest = beyond if slowest is None else max(slowest, beyond)
    if slowest is None:
        return None

    def line(key: int | None) -> Line:
        scale = slowest / rounds[key] if rounds.get(key) else 1.0
        return Line(calibrated_motif_seconds, _clamp(scale, 1.0, MAX_LATENCY_SCALE), 1.0, 0)

    return TelemetryFit({c: line(c) for c in topology.channels}, line(None), calibrated_motif_seconds)


def _line_shapes(samples: Sequence[Sample]) -> dict[int | None, list[Shape]]:
    lines: dict[int | None, list[Sample]] = {}
    for sample in samples:
        lines.setdefault(sample.channel, []).append(sample)
    return {key: _shapes(own) for key, own in lines.items()}


#: The other reading of a window of whole ops (:func:`optimizer_service.syndicate.live_search.live_search`):
#: every link at its calibrated rate, all that the window measured beyond it per motif.
RATE_AS_CALIBRATED = {"rate": 1.0}
#: The third reading: every link at its calibrated rate and its calibrated time per round, all that the
#: window measured beyond them per motif (the fixed cost a plan of many motifs pays again for each).
PER_MOTIF = {"rate": 1.0, "latency": 1.0}
#: The two readings a first plan is predicted between (:func:`optimizer_service.syndicate.live_search.live_search`):
#: the rate fitted, every round at its calibrated time and all the rest per motif; the rate fitted, every
#: motif at its calibrated fixed cost and all the rest per round (what a plan of motifs with fewer rounds
#: each pays less of). Unlike the third reading's, their rate is the window's: it prices the bytes of
#: passthrough's large ops as the fit does (FSDP2's windows fit channel 0 at half its calibrated rate).
EXCESS_PER_MOTIF = {"latency": 1.0}
EXCESS_PER_ROUND = {"motif_seconds": DEFAULT_DISPATCH_SECONDS}


def effects(fit: TelemetryFit, price: Callable[[TelemetryFit], float]) -> list[dict]:
    """Each fitted parameter's effect on a prediction: ``price`` of ``fit`` with that
    parameter at its calibrated value (``{"parameter", "predicted_seconds_without"}``)."""
    return [{"parameter": name, "predicted_seconds_without": price(fit.without(name))} for name in fit.parameters()]


# ----------------------------------------------------------------------- samples
class _Terms:
    """The calibrated model's two terms of a motif: latency alone, bytes alone."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        unbounded = tuple(replace(link, bandwidth=1e30, reduction=0.0) for link in topology.links)
        instant = tuple(replace(link, latency=0.0) for link in topology.links)
        self.latency = MotifCostModel(replace(topology, links=unbounded), dispatch_seconds=0.0)
        self.transfer = MotifCostModel(replace(topology, links=instant), dispatch_seconds=0.0)

    def of(self, motifs: tuple[Motif, ...]) -> tuple[float, float]:
        if len({m.kind for m in motifs}) > 1:
            each = [self.of((m,)) for m in motifs]
            return max(a for a, _ in each), max(b for _, b in each)
        return self.latency.step_seconds(motifs), self.transfer.step_seconds(motifs)

    def crosses(self, ranks: Sequence[int]) -> bool:
        return crosses_nodes(self.topology, ranks)


def _span(ends: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """From the last start to the last end."""
    return max(start for start, _ in ends), max(end for _, end in ends)


def _running(trace: Mapping, version: int) -> tuple[int, float] | None:
    """The iterations ``[first, end)`` of ``trace`` that ran plan ``version``: from
    its last switch to it to the next switch (all of them when the trace lists no
    switches: a plan file enforced from the start); None if it never ran it."""
    switches = sorted((int(s["iteration"]), int(s.get("version", -1))) for s in trace.get("switches") or ())
    if not switches:
        return 0, float("inf")
    starts = [k for k, (_, v) in enumerate(switches) if v == version]
    if not starts:
        return None
    k = starts[-1]
    return switches[k][0], switches[k + 1][0] if k + 1 < len(switches) else float("inf")


def motif_samples(topology: Topology, plan: Plan, traces: Sequence[Mapping]) -> list[Sample]:
    """One sample per motif run (iteration, plan order, channel, ranks) that every
    one of its ranks recorded, on the iterations each rank ran ``plan``."""
    terms = _Terms(topology)
    together: dict[tuple[int, int], list[Motif]] = {}       # (order, channel) -> the motifs run at once
    for op in plan.ops:
        for motif, order in zip(op.motifs, op.order):
            if motif.channel in topology.channels:
                together.setdefault((order, motif.channel), []).append(
                    replace(motif, ranks=tuple(op.key.group[p] for p in motif.ranks)))
    mine: dict[tuple[int, int, int], Motif] = {}           # (rank, order, channel) -> its motif
    modelled: dict[tuple[int, int], tuple[float, float]] = {}
    for (order, channel), motifs in together.items():
        modelled[order, channel] = terms.of(tuple(motifs))
        for motif in motifs:
            if motif.nbytes:
                mine.update({(rank, order, channel): motif for rank in motif.ranks})
    runs: dict[tuple, list[tuple[float, float]]] = {}
    for trace in traces:
        rank, base = int(trace.get("rank", -1)), float(trace.get("started_unix", 0.0))
        running = _running(trace, plan.version)
        if running is None:
            continue
        first, end = running
        for record in trace.get("motifs", ()):
            order, channel, iteration = int(record["order"]), int(record["channel"]), int(record["iteration"])
            motif = mine.get((rank, order, channel))
            if motif is None or not first <= iteration < end:
                continue
            start = base + float(record["start"])
            runs.setdefault((iteration, order, channel, motif.ranks), []).append(
                (start, start + float(record["seconds"])))
    samples = []
    for (_, order, channel, ranks), ends in sorted(runs.items()):
        if len(ends) != len(ranks):
            continue
        latency, transfer = modelled[order, channel]
        start, end = _span(ends)
        samples.append(Sample(channel if terms.crosses(ranks) else None, 1, latency, transfer, end - start))
    return samples


def passthrough_samples(topology: Topology, traces: Sequence[Mapping]) -> list[Sample]:
    """Samples of the ops the inner backend ran whole (not enforced), each recorded
    complete by every rank of its group (module docstring: busy periods); they
    crossed channel 0's NIC or stayed inside a node."""
    terms = _Terms(topology)
    by_all_reduce = reduce_scatter_by_all_reduce(traces)
    runs: dict[tuple, list[tuple[float, float]]] = {}
    for trace in traces:
        base = float(trace.get("started_unix", 0.0))
        for op in trace.get("ops", ()):
            if (op.get("enforced") or op["kind"] not in COMM_KINDS or op.get("completed") is None
                    or int(op["iteration"]) < 0):
                continue
            key = (int(op["iteration"]), int(op["seq"]), op["kind"], int(op["bytes"]),
                   tuple(int(g) for g in op["group"]), str(op.get("dtype", "float32")), int(op.get("root", 0)))
            runs.setdefault(key, []).append((base + float(op["issued"]), base + float(op["completed"])))
    priced: dict[tuple, tuple[int, float, float]] = {}
    spans: dict[tuple[int, ...], list[tuple[float, float, int, float, float]]] = {}
    for key, ends in runs.items():
        _, _, kind, nbytes, group, dtype, root = key
        if len(ends) != len(group) or len(group) < 2 or nbytes == 0:
            continue
        if key[2:] not in priced:
            priced[key[2:]] = _library_default(terms, kind, nbytes, group, dtype, root, by_all_reduce)
        spans.setdefault(group, []).append((*_span(ends), *priced[key[2:]]))
    samples = []
    for group, found in sorted(spans.items()):
        channel = 0 if terms.crosses(group) else None
        busy: list | None = None
        for start, end, motifs, latency, transfer in sorted(found):
            if busy is not None and start < busy[1]:
                busy = [busy[0], max(busy[1], end), busy[2] + motifs, busy[3] + latency, busy[4] + transfer]
                continue
            if busy is not None:
                samples.append(Sample(channel, busy[2], busy[3], busy[4], busy[1] - busy[0]))
            busy = [start, end, motifs, latency, transfer]
        if busy is not None:
            samples.append(Sample(channel, busy[2], busy[3], busy[4], busy[1] - busy[0]))
    return samples


def _library_default(terms: _Terms, kind: str, nbytes: int, group: tuple[int, ...], dtype: str,
                     root: int, by_all_reduce: bool) -> tuple[int, float, float]:
    """``(motifs on the longest chain, latency, transfer)`` of a traced op's first
    option on channel 0, built as the trace DAG builds it, of the op the inner backend
    runs (:mod:`.library_ops`: gloo's ReduceScatter is an AllReduce)."""
    collective = COMM_KINDS[kind]
    if collective is Collective.BROADCAST and 0 <= root < len(group):
        group = group[root:] + group[:root]
    known = dtype if dtype in DTYPE_BYTES else ""
    blocks = len(group) if collective is Collective.ALL_TO_ALL else 1
    op = library_op(comm_op(collective, group, -(-nbytes // (element_bytes(known) * blocks)), element_bytes(known)),
                    by_all_reduce)
    plan = library_option(op, terms.topology).plan
    latency = template_of(plan, terms.latency.step_seconds)
    transfer = template_of(plan, terms.transfer.step_seconds)
    chain: list[int] = []
    for before in latency.after:
        chain.append(1 + max((chain[b] for b in before), default=0))
    return max(chain, default=1), latency.isolated, transfer.isolated
