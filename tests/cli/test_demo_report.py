"""The pure parts of ``p2 demo``'s report: NIC drops per iteration and the live search's model time."""

from __future__ import annotations

import pytest

from optimizer_service.cli.demo_report import drop_rate, model_seconds, phases


def test_drop_rate_is_per_channel_and_per_iteration_between_the_samples_around_the_steps():
    samples = [(0, {0: 0, 1: 0}), (10, {0: 50, 1: 5}), (20, {0: 150, 1: 5}), (30, {0: 160, 1: 65})]
    assert drop_rate(samples, 11, 20) == {"0": 10.0, "1": 0.0}
    assert drop_rate(samples, 21, 30) == {"0": 1.0, "1": 6.0}
    assert drop_rate(samples, 5, 25) == {"0": 160 / 30, "1": 65 / 30}
    assert drop_rate(samples, 0, 10) is None            # no sample before the first step
    assert drop_rate(samples, 25, 31) is None           # none after the last
    assert drop_rate([], 1, 2) is None


def test_model_seconds_is_the_searched_event_of_that_version():
    events = [{"kind": "searched", "version": 1, "search": {"predicted_seconds": 0.5}},
              {"kind": "commit", "version": 2},
              {"kind": "searched", "version": 2, "search": {"predicted_seconds": 0.25}}]
    assert model_seconds(events, 2) == 0.25 and model_seconds(events, 1) == 0.5
    assert model_seconds(events, 3) is None and model_seconds(events, None) is None


def test_phases_carry_the_drops_of_their_steps():
    seconds = [1.0] * 10 + [0.5] * 20
    versions = [0] * 10 + [1] * 20
    drops = [(s, {0: 10 * s if s <= 10 else 100 + (s - 10), 1: 0}) for s in range(0, 31)]
    rows = phases({"step_seconds": seconds, "plan_versions": versions}, None,
                  {1: {"predicted_seconds": 0.6}}, [], drops)
    by_name = {row["name"]: row for row in rows}
    assert by_name["passthrough"]["nic_drops_per_iteration"] == {"0": pytest.approx(10.0), "1": 0.0}
    assert by_name["first-plan"]["nic_drops_per_iteration"] == {"0": pytest.approx(1.0), "1": 0.0}
    assert by_name["first-plan"]["measured_iteration_seconds"] == 0.5
    assert by_name["changed"]["nic_drops_per_iteration"] is None        # no change, no steps
