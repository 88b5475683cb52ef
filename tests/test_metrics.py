"""Every metric is defined in optimizer_service.metrics, p2_-prefixed, with its unit."""

from __future__ import annotations

import re

from prometheus_client.parser import text_string_to_metric_families

from optimizer_service import metrics

UNITS = ("_seconds", "_bytes", "_total", "_ratio", "_info")
#: Counts of things that have no unit (a version number, ranks), and a 0/1 state (as Prometheus' own ``up``).
DIMENSIONLESS = {"p2_plan_version", "p2_running_plan_version", "p2_ranks_connected", "p2_service_leader"}


def test_every_metric_is_p2_prefixed_and_names_its_unit():
    assert metrics.ALL
    for spec in metrics.ALL:
        assert re.fullmatch(r"p2_[a-z0-9_]+", spec.name), spec.name
        exposed = spec.name + ("_total" if spec.kind == "counter" else "")
        assert exposed.endswith(UNITS) or spec.name in DIMENSIONLESS, f"{exposed} does not end in a unit ({', '.join(UNITS)})"
        assert spec.help and len(spec.labels) <= 3


def test_enforcer_exposition_parses_as_prometheus_text():
    text = metrics.enforcer_exposition(3, {"all_reduce": 5, "broadcast": 1}, {"c10d.barrier": 2}, 0.25)
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    assert samples[("p2_rank_ops_total", (("kind", "all_reduce"), ("rank", "3")))] == 5
    assert samples[("p2_rank_ops_total", (("kind", "broadcast"), ("rank", "3")))] == 1
    assert samples[("p2_rank_bypassed_total", (("op", "c10d.barrier"), ("rank", "3")))] == 2
    assert samples[("p2_rank_dispatch_wait_seconds_total", (("rank", "3"),))] == 0.25
    assert all(name.startswith("p2_") for name, _ in samples)


def test_a_rank_with_nothing_recorded_still_exposes_its_wait_counter():
    text = metrics.enforcer_exposition(0, {}, {}, 0.0)
    names = {s.name for family in text_string_to_metric_families(text) for s in family.samples}
    assert names == {"p2_rank_dispatch_wait_seconds_total"}
