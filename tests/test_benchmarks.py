"""The synthesis benchmark's configurations reproduce the paper's program counts,
and the benchmark scripts run end to end (timings are reported, never asserted)."""

import importlib
import json
from pathlib import Path

import pytest

from benchmarks import optimize as optimize_bench
from benchmarks import reduce as reduce_bench
from benchmarks import synthesis as bench
from deploy.emulated import can_manage_namespaces
from optimizer_service.catalog import load_topology
from optimizer_service.p2.planner import Planner


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


@pytest.mark.netns
@pytest.mark.multiproc
@pytest.mark.skipif(not can_manage_namespaces(), reason="needs CAP_NET_ADMIN (run as root) for the emulated cluster")
def test_reduce_benchmark_runs_end_to_end(tmp_path, monkeypatch):
    monkeypatch.setattr(reduce_bench, "CONFIGURATIONS", {(2, 2): [((4,), (0,), 256 * 1024, None)]})
    assert reduce_bench.main(["--out", str(tmp_path), "--shapes", "2x2", "--nic", "400Mbit/s", "--top", "2",
                              "--repeat", "1", "--probe-bytes", "1MiB"]) == 0
    data = json.loads((tmp_path / "reduce.json").read_text())
    (cluster,) = data["clusters"]
    assert (cluster["nodes"], cluster["per_node"]) == (2, 2)
    assert {link["name"] for link in cluster["calibration"]["links"]} == {"loopback", "nic"}
    (row,) = data["summary"]["rows"]
    assert row["axes"] == [4] and row["best_speedup_crossing"] > 0
    assert data["summary"]["accuracy"]["candidates"] == 3  # flat + 2 programs
    assert cluster["fabric"] == "lossless" == data["settings"]["fabric"]           # the default
    assert row["nic_drops_per_run"] == 0 == data["summary"]["nic_drops"]["total"]  # lossless: nothing dropped
    assert data["summary"]["nic_drops"]["runs"] >= 3 * 2                          # one warm-up, one timed each
    assert (tmp_path / "reduce.png").stat().st_size > 10_000


@pytest.mark.parametrize("script", ["enforcer_cluster", "ucc_cluster", "reduce", "resharding"])
def test_cluster_benchmarks_refuse_an_unknown_fabric_with_one_line(script, capsys):
    module = importlib.import_module(f"benchmarks.{script}")
    assert module.main(["--fabric", "wet"]) == 2
    assert capsys.readouterr().err == f"{script}: --fabric 'wet' must be one of lossless, lossy\n"


def test_optimize_benchmark_runs_end_to_end(tmp_path):
    assert optimize_bench.main(["--quick", "--workloads", "dlrm-a1", "cnn-dp", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "optimize.json").read_text())
    assert set(data["systems"]) == {"dlrm-a1", "cnn-dp"}
    for workload in data["systems"].values():
        assert list(workload["systems"]) == ["FIFO", "BS+", "HO", "S-Exec", "S-Sched", "Syndicate"]
    assert set(data["findings"]) >= {"all_reduce", "all_to_all"} and set(data["speed"]) == {"dag_200", "dag_500"}
    assert set(data["findings"]["dlrm_bindings"]["dlrm-a1"]) == set(optimize_bench.BINDINGS)
    micro = data["findings"]["bound_overlap"]
    assert [r["all_reduce_bytes"] for r in micro] == optimize_bench.OVERLAP_AR_SIZES[::2]
    for row in micro:   # free per motif is never worse than any binding
        free = row["plans"]["free"]["seconds"]
        assert all(free <= plan["seconds"] + 1e-12 for plan in row["plans"].values())
        assert row["best_binding"] in optimize_bench.BINDINGS and row["best_binding"] != "free"
    assert data["systems"]["cnn-dp"]["systems"]["Syndicate"]["steady_speedup_over_bs+"] > 0
    assert (tmp_path / "optimize.png").stat().st_size > 10_000
    assert data["compute_slowdown"] == {}


def test_optimize_benchmark_what_if_slows_compute_on_channel_zero(tmp_path):
    assert optimize_bench.main(["--quick", "--workloads", "cnn-dp", "--compute-slowdown", "0.25",
                                "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "optimize-compute-slowdown-0.25.json").read_text())
    assert data["compute_slowdown"] == {"0": 0.25}
    assert (tmp_path / "optimize-compute-slowdown-0.25.png").stat().st_size > 10_000
    assert optimize_bench.main(["--compute-slowdown", "-1"]) == 2


@pytest.mark.slow
def test_dashboard_benchmark_runs_end_to_end(tmp_path):
    from benchmarks import dashboard as dashboard_bench

    assert dashboard_bench.main(["--jobs", "2", "--ranks", "4", "--requests", "10", "--history", "10", "--idle", "1",
                                 "--clients", "2", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "dashboard.json").read_text())
    assert list(data["routes"]) == [name for name, *_ in dashboard_bench.routes(dashboard_bench.EXPLORE)]
    for row in data["routes"].values():
        assert row["n"] == 10 and row["p99_ms"] >= row["p50_ms"] > 0
    assert data["concurrent"]["n"] == 20 and data["cpu"]["requests_served"] == 10 * len(data["routes"])
    assert (tmp_path / "dashboard.png").stat().st_size > 10_000
    assert dashboard_bench.main(["--jobs", "0"]) == 2


def test_resharding_benchmark_simulated_part(tmp_path):
    from benchmarks import resharding as reshard_bench
    assert reshard_bench.main(["--simulate-only", "--microbatches", "8", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "resharding.json").read_text())
    sim = data["pipeline_simulated"]
    assert sim["stages"] == 4 and sim["microbatches"] == 8
    assert all(seconds > 0 for seconds in sim["boundary_seconds"] + sim["skip_seconds"])
    for profile in ("gpt", "u-transformer"):
        rows = sim["profiles"][profile]["schedules"]
        assert set(rows) == {"1f1b", "eager-1f1b", "eager-1f1b-wd", "1f1b, no overlap", "signal send/recv"}
        assert rows["signal send/recv"]["iteration_seconds"] <= rows["eager-1f1b"]["iteration_seconds"]
    assert (tmp_path / "resharding.png").stat().st_size > 10_000


@pytest.mark.netns
@pytest.mark.multiproc
@pytest.mark.slow
@pytest.mark.skipif(not can_manage_namespaces(), reason="needs CAP_NET_ADMIN (run as root) for the emulated cluster")
def test_resharding_benchmark_measures_table2_cases(tmp_path):
    """Run as a user runs it, in a fresh interpreter: forking the ranks from this
    process, where gRPC threads of earlier tests may run, can abort the child."""
    import subprocess
    import sys

    from benchmarks import resharding as reshard_bench
    done = subprocess.run([sys.executable, str(reshard_bench.ROOT / "benchmarks" / "resharding.py"), "--cases",
                           "case3,case8", "--shape-divisor", "32", "--repeat", "1", "--skip",
                           "pipeline_simulated,pipeline_real", "--out", str(tmp_path)], capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ensemble / lower bound" in done.stdout
    table2 = json.loads((tmp_path / "resharding.json").read_text())["table2"]
    assert [row["name"] for row in table2["cases"]] == ["case3", "case8"]
    assert table2["cluster"]["nodes"] == 5 and table2["cluster"]["per_node"] == 4
    assert table2["cluster"]["fabric"] == "lossless" and table2["nic_drops"]["iterations"] == 2 * 5 * (1 + 1)
    for row in table2["cases"]:
        assert [s["name"] for s in row["systems"]] == [label for label, *_ in reshard_bench.SYSTEMS]
        assert all(s["measured_seconds"] > 0 and s["predicted_seconds"] > 0 for s in row["systems"])
        assert row["lower_bound_seconds"] > 0
    assert set(table2["findings"]["speedup_over_send_recv"]) == {"case3"}


def _run_benchmark(script: str, *args: str, timeout: int = 900):
    """A benchmark script in a fresh interpreter (see the test above: no forking from this process)."""
    import subprocess
    import sys

    from benchmarks import resharding as reshard_bench
    return subprocess.run([sys.executable, str(reshard_bench.ROOT / "benchmarks" / script), *args],
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.multiproc
@pytest.mark.skipif(not importlib.import_module("enforcer.group.native").available(), reason="the C++ backend is not built")
def test_overhead_benchmark_measures_both_implementations(tmp_path):
    done = _run_benchmark("enforcer_overhead.py", "--worlds", "1", "--rounds", "2", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "goals (C++ backend)" in done.stdout
    rows = json.loads((tmp_path / "enforcer_overhead.json").read_text())["rows"]
    sizes = ["16 MiB", "256 B, plan of 8 motifs", "8 B"]
    if importlib.import_module("enforcer.comm.ucc").available():
        sizes.insert(2, "256 B, plan of 8 motifs on UCC")
    assert sorted((r["impl"], r["size"]) for r in rows) == [(impl, size) for impl in ("cpp", "python") for size in sizes]
    assert all(r["gloo_seconds"] > 0 and r["p2enforcer_seconds"] > 0 for r in rows)
    assert (tmp_path / "enforcer_overhead.png").stat().st_size > 10_000


def test_trace_reads_benchmark_checks_both_reads_against_the_whole_read(tmp_path):
    done = _run_benchmark("trace_reads.py", "--iterations", "10", "40", "--repeats", "1", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads((tmp_path / "trace_reads.json").read_text())["rows"]
    impls = ["cpp", "python"] if importlib.import_module("enforcer.group.native").available() else ["python"]
    assert [(r["impl"], r["iterations_kept"]) for r in rows] == [(impl, n) for impl in impls for n in (10, 40)]
    for row in rows:
        assert row["window_windowed_seconds"] > 0 and row["window_whole_seconds"] > 0 and row["window_bytes"] > 0
        assert (row["telemetry_whole_seconds"] is None) == (row["impl"] == "python")
    assert "cheaper than the whole read" in done.stdout
    assert (tmp_path / "trace_reads.png").stat().st_size > 10_000
    bad = _run_benchmark("trace_reads.py", "--iterations", "3", "--out", str(tmp_path))
    assert bad.returncode == 2 and "--iterations must lie in" in bad.stderr


@pytest.mark.netns
@pytest.mark.multiproc
@pytest.mark.slow
@pytest.mark.skipif(not can_manage_namespaces(), reason="needs CAP_NET_ADMIN (run as root) for the emulated cluster")
@pytest.mark.skipif(not importlib.import_module("enforcer.comm.ucc").available(), reason="the UCC backend is not built")
def test_ucc_benchmark_compares_collectives_and_the_two_channel_plan(tmp_path):
    done = _run_benchmark("ucc_cluster.py", "--sizes", "65536", "--iterations", "1", "--plan-mib", "1",
                          "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((tmp_path / "ucc_cluster.json").read_text())
    assert [row["op"] for row in summary["collectives"]] == ["all_reduce", "all_gather", "reduce_scatter", "all_to_all"]
    assert all(row["gloo_seconds"] > 0 and row["ucc_seconds"] > 0 for row in summary["collectives"])
    assert set(summary["two_channels"]["median_seconds"]) == {"gloo passthrough", "plan, gloo + gloo",
                                                              "plan, gloo + ucc"}
    assert summary["fabric"] == "lossless"
    # Per part: every op (one warm-up and one timed per backend, op and size; two cases of the plan part).
    assert {part: d["iterations"] for part, d in summary["nic_drops"].items()} == {
        "collectives": 4 * 2 * 2, "plan, gloo + gloo": 2 * 2, "plan, gloo + ucc": 2 * 2}
    assert all(d["total"] == 0 for d in summary["nic_drops"].values())
    assert (tmp_path / "ucc_cluster.png").stat().st_size > 10_000


def _loop_report(peer_before: float, first: float, replanned: float, errors: tuple[float, ...],
                 iterations: int | None) -> dict:
    """The fields of a ``p2 demo --json`` report the loop benchmark reads (2 x 4, lossless)."""
    def phase(name, version, measured, bound):
        return {"name": name, "plan_version": version, "measured_iteration_seconds": measured,
                "predicted_iteration_seconds": measured * (1 + errors[0]), "model_iteration_seconds": measured,
                "bound_iteration_seconds": bound, "ratio_to_bound": measured / bound,
                "nic_drops_per_iteration": {"0": 0.0, "1": 0.0},
                "host_cores": {"busy": 0.9, "kernel": 0.2}}

    def peer(measured, bound):
        return {"measured_iteration_seconds": measured, "steps": 35, "nic_drops_per_iteration": {"0": 0.0, "1": 0.0},
                "bound_iteration_seconds": bound, "ratio_to_bound": measured / bound}

    return {"job": {"id": "dlrm"}, "cluster": {"fabric": "lossless", "emulated": True},
            "phases": [phase("passthrough", 0, 0.33, 0.16), phase("first-plan", 1, first, 0.16),
                       phase("changed", 1, 0.40, 0.2), phase("replanned", 2, replanned, 0.2)],
            "peer": {"before": peer(peer_before, 0.16), "after": peer(0.30, 0.2)},
            "plans": [{"plan_version": v, "cluster": state, "measured_iteration_seconds": s, "ratio_to_bound": r,
                       "prediction_error": e}
                      for v, state, s, r, e in ((1, "before", first, first / 0.16, errors[1]),
                                                (2, "after", replanned, replanned / 0.2, errors[2]))],
            "speedup": 0.33 / first, "speedup_over_peer": peer_before / first,
            "replan": {"iterations_to_commit": iterations, "speedup_over_peer": 0.30 / replanned,
                       "speedup_over_passthrough": 0.33 / replanned, "ratio_to_offline_best": 1.02},
            "first_plan": {"seconds_to_commit": 0.8}}


def test_loop_benchmark_checks_the_issues_goals_per_run():
    from benchmarks import loop as loop_bench

    met = loop_bench.figures(_loop_report(0.26, 0.18, 0.22, (0.05, -0.1, 0.12), 14), {"ratio": 1.01}, 1)
    assert met["speedup_over_peer"] == pytest.approx(0.26 / 0.18) and met["best_plan_version"] == 1
    assert met["first_plan_ratio_to_bound"] == pytest.approx(0.18 / 0.16)
    assert met["measured_ratio_to_offline_best"] == 1.01
    assert set(met["nic_drops_per_iteration"]) == {"passthrough", "first-plan", "changed", "replanned",
                                                   "peer-before", "peer-after"}
    assert list(loop_bench.goals(met).values()) == [True] * 6
    assert met["host_cores"]["first-plan"] == {"busy": 0.9, "kernel": 0.2} and met["host_cores"]["peer-before"] is None
    assert "  dlrm lossless run 1: 90 % (k 20 %), -, 90 % (k 20 %)" in "\n".join(
        loop_bench.summary([{**met, "goals": loop_bench.goals(met)}]))
    assert met["steal"] is None
    assert "the hypervisor's steal time (the cores it took from this machine; from 2 % in a phase, a run is not " \
           "comparable with one that had none): none" in loop_bench.summary([{**met, "goals": {}}])

    # The hypervisor took 9 % of the cores while the first plan ran: marked in the row and the summary.
    robbed_report = _loop_report(0.26, 0.18, 0.22, (0.05, -0.1, 0.12), 14)
    robbed_report["phases"][1]["host_cores"] = {"busy": 0.85, "kernel": 0.2, "steal": 0.09}
    robbed = loop_bench.figures(robbed_report, {}, 5)
    assert robbed["steal"] == {"phase": "first-plan", "share": 0.09}
    summarised = "\n".join(loop_bench.summary([{**robbed, "goals": {}}]))
    assert "dlrm lossless run 5 9 % in first-plan" in summarised
    assert "90 % (k 20 %), -, 85 % (k 20 %), stolen 9 %, 90 % (k 20 %)" in summarised

    # 1.24x over the peer (DLRM's goal is 1.3x), a plan off by 20 %, the replan 40 iterations late and
    # slower than the peer on the changed cluster and than its bound allows.
    missed = loop_bench.figures(_loop_report(0.26, 0.21, 0.31, (0.05, -0.2, 0.1), 40), {}, 2)
    assert loop_bench.goals(missed) == {"first plan >= 1.3x over the peer": False,
                                        "first plan within 1.15x of the bound": False,
                                        "every prediction within 15%": False,
                                        "replan within 30 iterations": False,
                                        "replan never slower than passthrough or the peer": False,
                                        "replan within 1.15x of the new bound": False}
    lines = loop_bench.summary([{**met, "goals": loop_bench.goals(met)}, {**missed, "goals": loop_bench.goals(missed)}])
    assert any(line.startswith("dlrm  lossless   1 ") for line in lines)
    assert any("run 2: first plan >= 1.3x over the peer FAIL" in line for line in lines)

    # A plan committed just before the change that ran only after it: shown, not judged.
    stale = _loop_report(0.26, 0.18, 0.22, (0.05, -0.1, 0.12), 14)
    stale["plans"].insert(1, {"plan_version": 2, "cluster": "before", "steps": 0, "measured_iteration_seconds": None,
                              "ratio_to_bound": None, "prediction_error": None})
    judged = loop_bench.figures(stale, {}, 4)
    assert loop_bench.goals(judged)["every prediction within 15%"] is True
    assert "v2 not run on the state it was predicted for" in "\n".join(loop_bench.summary([{**judged, "goals": {}}]))

    # No replan committed: its goals cannot be shown by the run.
    unmeasured = loop_bench.figures(_loop_report(0.26, 0.18, 0.22, (0.0, 0.0, 0.0), None), {}, 3)
    assert loop_bench.goals(unmeasured)["replan within 30 iterations"] is None


def test_loop_benchmark_shows_the_first_plan_alone_beside_the_loops_measurement():
    from benchmarks import loop as loop_bench

    alone = {"first_plan_seconds": 0.2, "peer_seconds": 0.26, "passthrough_seconds": 0.34,
             "speedup_over_peer": 1.3, "speedup_over_passthrough": 1.7, "ratio_to_bound": 1.25, "loop_over_alone": 1.2}
    row = loop_bench.figures(_loop_report(0.26, 0.24, 0.22, (0.0, 0.0, 0.0), 14), {}, 1, alone)
    assert (row["first_plan_alone_seconds"], row["peer_alone_seconds"], row["first_plan_loop_over_alone"]) == (
        0.2, 0.26, 1.2)
    line = next(line for line in loop_bench.summary([{**row, "goals": loop_bench.goals(row)}])
                if line.startswith("  dlrm lossless run 1: 0.200 s"))
    assert "1.30x over the peer's 0.260 s, 1.70x over passthrough's 0.340 s, 1.25x the bound; in the loop 1.20x" in line
    # The goals stay the loop's: the plan alone is shown, not judged.
    assert loop_bench.goals(row)["first plan >= 1.3x over the peer"] is False
    unmeasured = loop_bench.figures(_loop_report(0.26, 0.24, 0.22, (0.0, 0.0, 0.0), 14), {}, 2, {"skipped": "x"})
    assert "  dlrm lossless run 2: not measured" in loop_bench.summary([{**unmeasured, "goals": {}}])


def test_loop_benchmark_shows_what_the_steps_beside_the_services_searches_were_left_out_of():
    from benchmarks import loop as loop_bench

    report = _loop_report(0.26, 0.18, 0.22, (0.0, 0.0, 0.0), 14)
    report["phases"][1].update(search_steps=9, with_searches_iteration_seconds=0.19)
    report["peer"]["before"].update(search_turns=1, with_searches_iteration_seconds=0.27)
    row = loop_bench.figures(report, {}, 1)
    assert (row["first_plan_search_steps"], row["first_plan_with_searches_seconds"]) == (9, 0.19)
    assert (row["peer_search_turns"], row["peer_with_searches_seconds"]) == (1, 0.27)
    assert row["speedup_over_peer"] == pytest.approx(0.26 / 0.18)       # the medians without them
    assert ("  dlrm lossless run 1: first plan 9 steps (with them 0.190 s), the peer 1 turns (with them 0.270 s)"
            in loop_bench.summary([{**row, "goals": {}}]))


@pytest.mark.netns
@pytest.mark.multiproc
@pytest.mark.slow
@pytest.mark.skipif(not can_manage_namespaces(), reason="needs CAP_NET_ADMIN (run as root) for the emulated cluster")
def test_first_plan_alone_runs_the_plan_the_peer_and_passthrough_in_turns(tmp_path):
    """A recorded DLRM first plan (2 x 4 ranks), stored as a run's v1, run alone with the peer and
    passthrough on a fresh emulated cluster: real ranks, each entry's steps after warm-up."""
    from benchmarks import loop_alone
    from optimizer_service.service.store.sqlite_store import SqlitePlanStore

    record = json.loads((Path(__file__).parent / "optimizer_service" / "syndicate" / "data" /
                         "dlrm-first-window.json").read_text())
    store = SqlitePlanStore.open(tmp_path / "service.db")
    store.add_plan("dlrm", 1, record["plan_json"], 0.0)
    store.close()
    report = {"job": {"id": "dlrm", "model_flags": []},
              "cluster": {"emulated": True, "nodes": 2, "per_node": 4, "nic_bytes_per_second": 25e6,
                          "nic2_bytes_per_second": 25e6, "fabric": "lossless", "throttle": 4.0},
              "phases": [{"name": "first-plan", "plan_version": 1, "measured_iteration_seconds": 0.25,
                          "bound_iteration_seconds": 0.15}]}
    alone = loop_alone.first_plan_alone(report, tmp_path, loop_alone.WARMUP + 3, 1, "p2t-alone")
    assert alone["steps_each"] == 3 and alone["rounds"] == 1
    assert all(alone[key] > 0 for key in ("first_plan_seconds", "peer_seconds", "passthrough_seconds"))
    assert alone["loop_over_alone"] == pytest.approx(0.25 / alone["first_plan_seconds"])
    assert alone["ratio_to_bound"] == pytest.approx(alone["first_plan_seconds"] / 0.15)
    log = (tmp_path / "alone.log").read_text()
    # Every rank of the plan's run ran plan v1 from its first step; the peer's over both NICs.
    assert json.loads((tmp_path / "alone-first_plan-0.out.json").read_text())["plan_versions"] == [1] * 11
    assert json.loads((tmp_path / "alone-peer-0.out.json").read_text())["backend"] == "gloo"
    assert "Traceback" not in log
    skipped = loop_alone.first_plan_alone({**report, "cluster": {**report["cluster"], "emulated": False}},
                                          tmp_path, 11, 1, "p2t-alone")
    assert "skipped" in skipped


@pytest.mark.parametrize("args, words", [
    (["--jobs", "dlrm,nope"], "unknown job 'nope'"),
    (["--fabrics", "wet"], "unknown fabric 'wet'"),
    (["--runs", "0"], "--runs 0 must be at least 1"),
    (["--name", "a-very-long-name"], "--name 'a-very-long-name'"),
])
def test_loop_benchmark_refuses_bad_options_with_one_line(args, words, capsys):
    from benchmarks import loop as loop_bench

    with pytest.raises(SystemExit) as stopped:
        loop_bench.main(args)
    assert stopped.value.code == 2 and words in capsys.readouterr().err


def test_loop_benchmark_keeps_each_runs_store_and_logs(tmp_path):
    """What a run leaves to be read afterwards: the store (every plan and decision), the logs that
    exist and the search records, copied as they are; the ranks' log stays behind."""
    from benchmarks import loop as loop_bench

    work = tmp_path / "work"
    work.mkdir()
    (work / "service.db").write_bytes(b"SQLite format 3\x00" + bytes(64))
    (work / "service.log").write_text("searched v1\n")
    (work / "ranks.log").write_text("rank output\n")
    (work / "searches").mkdir()
    (work / "searches" / "job-v1.json").write_text("{}\n")
    kept = tmp_path / "out" / "runs" / "ddp-lossless-1"
    loop_bench.keep(work, kept)
    assert sorted(path.name for path in kept.iterdir()) == ["searches", "service.db", "service.log"]
    assert (kept / "searches" / "job-v1.json").read_text() == "{}\n"
    assert (kept / "service.db").read_bytes() == (work / "service.db").read_bytes()


def test_replay_searches_a_record_again_with_its_seed_and_others(tmp_path, capsys):
    """A real live search's record (the inputs and outcome the service writes), searched again:
    the recorded seed gives the recorded plan and prediction, each further seed a prediction."""
    from benchmarks import replay
    from optimizer_service.service import planning, search_record
    from tests.optimizer_service.syndicate.test_live_search import TOPOLOGY, passthrough_traces

    traces = passthrough_traces([0.02] * 8)
    outcome = planning.search(traces, TOPOLOGY.to_yaml(), 0, None, 5_000, None)
    search_record.write(tmp_path / "searches", search_record.SearchRecord(
        "job-r", 1, "state", traces, TOPOLOGY.to_yaml(), 0, None, 5_000, None, outcome.plan_json, outcome.to_dict()))
    demo = tmp_path / "demo.json"          # what p2 demo measured under v1 on its cluster state
    demo.write_text(json.dumps({"plans": [{"plan_version": 1, "cluster": "before", "steps": 30,
                                           "measured_iteration_seconds": 0.05, "predicted_iteration_seconds": 0.04}]}))
    assert replay.main([str(tmp_path / "searches"), "--seeds", "2", "--demo", str(demo),
                        "--out", str(tmp_path / "out")]) == 0
    (row,) = json.loads((tmp_path / "out" / "replay.json").read_text())["records"]
    assert row["reproduced"] and row["first_in_state"] and [s["seed"] for s in row["seeds"]] == [1, 2]
    assert row["measured_seconds"] == 0.05 and row["prediction_error"] == pytest.approx(0.04 / 0.05 - 1)
    assert all(s["predicted_seconds"] > 0 for s in row["seeds"]) and row["seed_spread"] >= 0
    assert (tmp_path / "out" / "replay.png").stat().st_size > 0
    assert "job-r-v1.json" in capsys.readouterr().out


@pytest.mark.parametrize("name, more, words", [
    ("absent", [], "is neither a search record nor a folder"),
    ("x.json", [], "is not a search record"),
    ("empty", [], "holds no search record"),
    ("x.json", ["--demo", "x.json"], "is not p2 demo's JSON with its 'plans'"),
])
def test_replay_refuses_bad_input_with_one_line(tmp_path, monkeypatch, name, more, words, capsys):
    from benchmarks import replay

    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "x.json").write_text("{}")
    (folder / "empty").mkdir()
    monkeypatch.chdir(folder)
    with pytest.raises(SystemExit) as stopped:
        replay.main([name, *more, "--out", str(tmp_path / "out")])
    error = capsys.readouterr().err
    assert stopped.value.code == 2 and words in error and error.count("\n") == 1


def _first_and_later(folder: Path, later_job: str = "job-r", later_plan: bool = True):
    """A real first search's record (passthrough's window) and a later one of the same state that ran its plan."""
    from optimizer_service.service import planning, search_record
    from tests.optimizer_service.syndicate.test_live_search import TOPOLOGY, passthrough_traces

    traces = passthrough_traces([0.02] * 8)
    outcome = planning.search(traces, TOPOLOGY.to_yaml(), 0, None, 5_000, None)
    first = search_record.write(folder, search_record.SearchRecord(
        "job-r", 1, "state", traces, TOPOLOGY.to_yaml(), 0, None, 5_000, None, outcome.plan_json, outcome.to_dict()))
    later = search_record.write(folder, search_record.SearchRecord(
        later_job, 2, "state", traces, TOPOLOGY.to_yaml(), 0, outcome.plan_json if later_plan else None, 5_000,
        outcome.fit, outcome.plan_json, outcome.to_dict()))
    return first, later, outcome


def test_extrapolation_prices_a_plan_on_the_first_window_line_by_line(tmp_path, capsys):
    """The first search's own plan, priced on its window with its fit, is its prediction; the rows that
    swap lines in from the later window, and the demo's measured time, sit beside it."""
    from benchmarks import extrapolation

    first, later, outcome = _first_and_later(tmp_path / "searches")
    demo = tmp_path / "demo.json"
    demo.write_text(json.dumps({"plans": [{"plan_version": 1, "cluster": "before", "steps": 30,
                                           "measured_iteration_seconds": 0.05}]}))
    assert extrapolation.main([str(first), str(later), "--demo", str(demo), "--out", str(tmp_path / "out")]) == 0
    report = json.loads((tmp_path / "out" / "extrapolation.json").read_text())
    rows = {row["fit"]: row for row in report["rows"]}
    assert report["first_plan_is_priced"] and report["plan_version"] == 1 and report["measured_seconds"] == 0.05
    # a first window: the plan is predicted at the middle of its two readings, beside the fit's own price
    assert rows[extrapolation.MIDDLE]["seconds"] == pytest.approx(outcome.predicted_seconds, rel=1e-9)
    assert rows["the first window's fit"]["seconds"] == pytest.approx(outcome.fit["fit_predicted_seconds"], rel=1e-9)
    assert set(rows) >= {"the same, unsampled rounds as calibrated", "channel 0 from the later window",
                         "channel 1 from the later window", "host from the later window",
                         "unsampled lines from the later window", "the later window's fit"}
    assert all(row["error"] == pytest.approx(row["seconds"] / 0.05 - 1) for row in rows.values())
    # channel 1 and the host had no sample: their rounds took channel 0's, so priced as calibrated the plan is faster
    lines = report["lines"]["first"]
    assert lines["channels"]["1"]["round_shared"] and lines["host"]["round_shared"]
    assert rows["the same, unsampled rounds as calibrated"]["seconds"] <= rows["the first window's fit"]["seconds"]
    assert (tmp_path / "out" / "extrapolation.png").stat().st_size > 0
    assert "the first window's fit" in capsys.readouterr().out


@pytest.mark.parametrize("later_job, later_plan, words", [
    ("job-other", True, "are not of one job and cluster state"),
    ("job-r", False, "window ran no plan (passthrough): nothing to price"),
])
def test_extrapolation_refuses_records_it_cannot_compare_with_one_line(tmp_path, later_job, later_plan, words, capsys):
    from benchmarks import extrapolation

    first, later, _ = _first_and_later(tmp_path / "searches", later_job, later_plan)
    with pytest.raises(SystemExit) as stopped:
        extrapolation.main([str(first), str(later), "--out", str(tmp_path / "out")])
    error = capsys.readouterr().err
    assert stopped.value.code == 2 and words in error and error.count("\n") == 1
    with pytest.raises(SystemExit) as stopped:
        extrapolation.main([str(tmp_path / "absent.json"), str(later)])
    assert stopped.value.code == 2 and "is not a search record (no such file)" in capsys.readouterr().err
