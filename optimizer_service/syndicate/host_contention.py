"""A plan's time on a host whose cores its ranks share (issue 32, item 3; pure).

The fixed cost of a motif that :mod:`~optimizer_service.syndicate.telemetry_fit`
fits is mostly waiting: for the thread that issues the motif to get a core,
and for the peer's thread to get one. It is fitted on a window — passthrough's,
before the first plan — at that window's load, and a plan that runs faster
loads the same cores harder: the ranks' CPU per iteration stays about the
same (the emulated DLRM job, 8 ranks on 2 cores: 0.45, 0.49 and 0.46 core-s
per iteration under passthrough, its first plan and its replan), so a shorter
iteration means busier cores. In that run the fixed costs the second search
fitted to the first plan's own window were 1.4–2.5× what passthrough's window
had given (channel 0 5.5 ms against 2.2 ms), and the first plan ran 18 %
slower than its prediction.

**The model** (processor sharing, the response-time law of a single queue): a
thread that needs a core waits in proportion to ``1 / (1 − ρ)``, ``ρ`` the
share of the host's cores that are busy. The window's ranks kept
``ρ_w = W / (C · T_w)`` of them busy (``W``: their CPU seconds per iteration,
summed over the host's ranks; ``C``: its cores; ``T_w``: the window's
iteration time, :class:`~optimizer_service.syndicate.host_load.HostLoad`). A
plan that takes ``T`` per iteration keeps ``ρ(T) = W / (C · T)`` busy, so its
fixed costs are the window's times ``k(T) = (1 − ρ_w) / (1 − ρ(T))``. The
plan's time is then the fixed point ``T = price(k(T))``, ``price(k)`` the
model's time of the plan with every fixed cost ``k`` times the fitted one:
``price`` grows with ``k`` and ``k`` falls with ``T``, so there is one fixed
point, found by bisection (:func:`contended_seconds`).

Our readings: ``ρ`` counts the job's ranks only (what their traces can say on
any host); the host's other work — the kernel's packet handling on the
emulated NICs, a co-located optimizer service — is taken to be the same in the
window and under the plan. ``ρ`` is capped at :data:`MAX_BUSY` and ``k`` kept
within ``[1/MAX_FACTOR, MAX_FACTOR]``, so one odd window cannot move a
prediction without bound. Only the fixed costs scale: a link's rate is the
NIC's, and what the host's own links move is fitted as a rate that already
carries the window's load. The search ranks plans with the fitted costs as
they are; the fixed point corrects the prediction of the plan it chose and of
the plan that runs (which the service compares it with), so a gain is judged
with both at the load each would put on the host.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from optimizer_service.syndicate.host_load import HostLoad

MAX_BUSY = 0.95        # the busiest share of the cores the model lets a plan reach
MAX_FACTOR = 4.0       # the most the fixed costs may grow (or shrink) over the window's
ROUNDS = 25            # bisection rounds: the fixed point to a 2^-25 share of the starting interval


@dataclass(frozen=True)
class Contention:
    """The host the window ran on, as the model needs it: its ranks' CPU per
    iteration (``cpu_seconds``, the most loaded host's), its cores, and the
    window's iteration time."""

    cpu_seconds: float
    cores: float
    window_seconds: float

    @classmethod
    def of(cls, hosts: Sequence[HostLoad], window_seconds: float) -> Contention | None:
        """The most loaded of ``hosts`` over the window (None without one, or
        without a usable figure)."""
        busiest = max(hosts, key=lambda host: host.process_cpu_seconds / host.cores if host.cores > 0 else 0.0,
                      default=None)
        if busiest is None or busiest.cores <= 0 or busiest.process_cpu_seconds <= 0 or window_seconds <= 0:
            return None
        return cls(busiest.process_cpu_seconds, busiest.cores, window_seconds)

    def busy(self, seconds: float) -> float:
        """The share of the cores the ranks keep busy at ``seconds`` per iteration (capped)."""
        return min(MAX_BUSY, self.cpu_seconds / (self.cores * seconds)) if seconds > 0 else MAX_BUSY

    def factor(self, seconds: float) -> float:
        """``k(T)``: how much longer every fixed cost is at ``seconds`` per iteration than in the window."""
        found = (1.0 - self.busy(self.window_seconds)) / (1.0 - self.busy(seconds))
        return max(1.0 / MAX_FACTOR, min(MAX_FACTOR, found))

    def to_dict(self) -> dict:
        return {"cpu_seconds": self.cpu_seconds, "cores": self.cores, "window_seconds": self.window_seconds,
                "window_busy": self.busy(self.window_seconds)}


def contended_seconds(price: Callable[[float], float], contention: Contention | None) -> tuple[float, float]:
    """``(T, k)``: the plan's time at the load it puts on the host and the factor its
    fixed costs took (module docstring); ``price(k)`` is its time with every fixed
    cost ``k`` times the fitted one. Without a host, ``(price(1), 1)``."""
    if contention is None:
        return price(1.0), 1.0
    low, high = price(1.0 / MAX_FACTOR), price(MAX_FACTOR)      # T = price(k(T)) lies between these
    if high <= low:
        return low, contention.factor(low)
    for _ in range(ROUNDS):
        middle = (low + high) / 2
        if price(contention.factor(middle)) > middle:
            low = middle
        else:
            high = middle
    seconds = (low + high) / 2
    return seconds, contention.factor(seconds)
