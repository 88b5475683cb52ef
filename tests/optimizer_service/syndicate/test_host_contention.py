"""A plan's time at the load it puts on the cores its ranks share: the fixed point of the fixed costs' growth."""

from __future__ import annotations

import pytest

from optimizer_service.syndicate.host_contention import MAX_BUSY, MAX_FACTOR, Contention, contended_seconds
from optimizer_service.syndicate.host_load import HostLoad
from optimizer_service.syndicate.live_search import live_search
from optimizer_service.syndicate.refit import refit
from optimizer_service.syndicate.telemetry_fit import TelemetryFit
from tests.optimizer_service.syndicate.test_live_search import TOPOLOGY, passthrough_traces


def line(base: float, per_factor: float):
    """A plan whose time is ``base`` plus its fixed costs, ``per_factor`` at the window's load."""
    return lambda k: base + per_factor * k


def test_a_faster_plan_loads_the_cores_harder_and_its_fixed_costs_grow_to_the_fixed_point():
    window = Contention(cpu_seconds=0.4, cores=2.0, window_seconds=0.4)      # 50 % busy
    seconds, factor = contended_seconds(line(0.2, 0.05), window)
    assert factor == pytest.approx(window.factor(seconds)) and factor > 1
    assert seconds == pytest.approx(0.2 + 0.05 * factor, rel=1e-6)           # T = price(k(T))
    assert window.busy(seconds) == pytest.approx(0.4 / (2 * seconds))
    assert factor == pytest.approx(0.5 / (1 - 0.4 / (2 * seconds)), rel=1e-6)
    # A plan slower than the window idles the cores: its fixed costs shrink.
    slower, shrink = contended_seconds(line(0.6, 0.05), window)
    assert shrink < 1 and slower < 0.65


def test_without_a_host_the_price_is_the_fitted_one_and_the_factor_stays_within_its_clamp():
    assert contended_seconds(line(0.2, 0.05), None) == (pytest.approx(0.25), 1.0)
    crowded = Contention(cpu_seconds=1.9, cores=2.0, window_seconds=1.0)     # 95 % busy already
    assert crowded.busy(0.01) == MAX_BUSY
    idle = Contention(cpu_seconds=0.02, cores=2.0, window_seconds=0.01)      # the window itself at the cap
    seconds, factor = contended_seconds(line(10.0, 1.0), idle)
    assert factor == 1 / MAX_FACTOR and seconds == pytest.approx(10.25)     # a slow plan: clamped
    assert 1 / MAX_FACTOR <= factor <= MAX_FACTOR


def test_the_most_loaded_host_counts():
    def host(name, cores, cpu):
        return HostLoad(name, cores, (0,), 5, 1.0, cpu, cpu / 2)
    picked = Contention.of([host("a", 8, 2.0), host("b", 2, 1.0)], 0.5)
    assert (picked.cpu_seconds, picked.cores, picked.window_seconds) == (1.0, 2.0, 0.5)
    assert Contention.of([], 0.5) is None and Contention.of([host("a", 0, 1.0)], 0.5) is None


def test_the_live_search_predicts_the_plan_and_passthrough_at_their_own_load():
    traces = passthrough_traces([0.02] * 8)
    bare = live_search(traces, TOPOLOGY)
    # a first search chooses by the worst of the readings of its window and predicts at the middle of two
    # (test_live_search); the fit's own price is kept beside it
    chosen, fit = bare.found.chosen, TelemetryFit.from_dict(bare.fit)
    by_fit = bare.found.problem.steady_seconds_priced(fit.motif_cost(refit(TOPOLOGY, fit)), chosen.choice,
                                                      chosen.policy, chosen.framework_order)
    assert bare.fit["host_contention"] is None and bare.fit["fit_predicted_seconds"] == pytest.approx(by_fit, rel=1e-12)
    assert bare.predicted_seconds == pytest.approx(sum(bare.fit["predicted_between"]) / 2, rel=1e-12)
    assert by_fit <= chosen.steady_seconds
    window = bare.measured_seconds
    for t in traces:                          # the ranks kept the host's 2 cores 60 % busy over the window
        t["host"] = {"id": "one", "cores": 2}
        t["cpu"] = [{"iteration": k, "wall": window, "process_cpu": 0.3 * window, "step_thread_cpu": 0.1 * window}
                    for k in range(8)]
    live = live_search(traces, TOPOLOGY)
    contention = live.fit["host_contention"]
    assert contention["window_busy"] == pytest.approx(0.6)
    assert contention["predicted_seconds_uncontended"] == pytest.approx(by_fit)
    if by_fit < window:               # a faster plan: busier cores, dearer motifs
        assert contention["factor"] > 1 and live.fit["fit_predicted_seconds"] > by_fit
    assert live.fit["predicted_seconds"] == live.predicted_seconds == live.found.plan.predicted_iteration_seconds
    assert live.running_seconds == pytest.approx(bare.running_seconds, rel=0.05)   # passthrough at its own load
    effects = {e["parameter"]: e["predicted_seconds_without"] for e in live.fit["effects"]}
    assert effects["the host's load"] == pytest.approx(by_fit)
    assert live.found.bound.hosts and live.found.bound.host_seconds == pytest.approx(4 * 0.1 * window / 2)
