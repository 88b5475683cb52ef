"""The synthesis benchmark's configurations reproduce the paper's program counts,
and the benchmark script runs end to end (timings are reported, never asserted)."""

import json

import pytest

from benchmarks import synthesis as bench
from optimizer_service.catalog import load_topology
from optimizer_service.planner import Planner


@pytest.mark.parametrize("preset,axes,reduce,paper", bench.PAPER_CONFIGURATIONS,
                         ids=[f"{p}-{a}-r{r}" for p, a, r, _ in bench.PAPER_CONFIGURATIONS])
def test_program_counts_equal_appendix_a(preset, axes, reduce, paper):
    report = Planner().synthesize(load_topology(preset), axes, reduce)
    assert sum(len(p.programs) for p in report.placements) == paper


def test_benchmark_script_writes_json_and_png(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "PAPER_CONFIGURATIONS", bench.PAPER_CONFIGURATIONS[:3])
    monkeypatch.setattr(bench, "LARGE_CONFIGURATIONS", bench.LARGE_CONFIGURATIONS[-1:])
    assert bench.main(["--out", str(tmp_path), "--repeat", "1"]) == 0
    data = json.loads((tmp_path / "synthesis.json").read_text())
    assert data["summary"]["program_counts_matching_paper"] == 3
    assert len(data["paper"]) == 6 and len(data["large"]) == 2
    assert (tmp_path / "synthesis.png").stat().st_size > 10_000
