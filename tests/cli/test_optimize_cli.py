"""``p2 optimize`` end to end, through the real entry point."""

import json

import pytest

from optimizer_service.plan.plan import Plan
from optimizer_service.units import human_seconds
from tests.support.cli import p2
from tests.support.traces import op, trace

SYSTEM_NAMES = ["FIFO", "BS+", "HO", "S-Exec", "S-Sched", "Syndicate"]


def test_help_and_list():
    assert p2("optimize", "--help").returncode == 0
    listed = p2("optimize", "--list")
    assert listed.returncode == 0
    names = [line.split()[0] for line in listed.stdout.splitlines()]
    assert names == ["dlrm-a1", "dlrm-a2", "dlrm-a3", "fsdp", "transformer-dp-tp", "cnn-dp", "pipeline-gpt",
                     "pipeline-u-transformer"]
    assert "eager-1f1b x 8 micro-batches" in listed.stdout and "emulated" not in listed.stderr


def test_a_workload_gives_the_table_the_json_the_plan_and_the_gantt(tmp_path):
    out, plan, png = tmp_path / "o.json", tmp_path / "plan.json", tmp_path / "g.png"
    result = p2("optimize", "--workload", "dlrm-a1", "--budget", "2", "--seed", "4", "--json", str(out),
                "--plan", str(plan), "--gantt", str(png))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines[1:-1]] == SYSTEM_NAMES
    data = json.loads(out.read_text())
    # the lower bound beside Syndicate's prediction: printed, in the JSON and on the plan
    bound = data["bound"]
    syndicate = data["systems"][-1]["iteration_seconds"]
    assert 0 < data["bound_iteration_seconds"] == bound["seconds"] == data["plan"]["bound_iteration_seconds"]
    assert bound["seconds"] <= syndicate * (1 + 1e-9) and bound["binding"]
    assert bound["seconds"] == max(bound["compute_seconds"], bound["stream_seconds"], bound["network_seconds"],
                                   bound["release_seconds"])
    released = (f", from the ops' release {human_seconds(bound['release_seconds'])}"
                if bound["release_seconds"] > bound["network_seconds"] else "")
    assert lines[-1] == (f"Syndicate predicts {syndicate * 1e3:.3f} ms per iteration, "
                         f"{syndicate / bound['seconds']:.2f}x the lower bound: {human_seconds(bound['seconds'])}, "
                         f"bound by {bound['binding']} (critical path {human_seconds(bound['compute_seconds'])}, "
                         f"busiest compute stream {human_seconds(bound['stream_seconds'])}, "
                         f"NICs {human_seconds(bound['network_seconds'])}{released})")
    assert data["workload"] == "dlrm-a1" and data["topology"] == "hgx2-4n"
    assert [s["name"] for s in data["systems"]] == SYSTEM_NAMES
    for system in data["systems"]:
        assert system["iteration_seconds"] > 0 and 0 <= system["compute_idle_fraction"] < 1
        assert 0 < system["steady_state_seconds"] <= system["iteration_seconds"] * (1 + 1e-9)
    bs = next(s for s in data["systems"] if s["name"] == "BS+")
    assert bs["steady_state_speedup_over_bs_plus"] == 1.0
    assert data["search"]["evaluations"] > 0 and data["search"]["accepted"] > 0 and data["search"]["seconds"] > 0
    installed = Plan.parse(plan.read_text())
    assert json.loads(installed.to_json()) == data["plan"]
    assert {o.key.kind for o in installed.ops} == {"all_reduce", "all_to_all"}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_same_seed_gives_the_same_plan():
    first = p2("optimize", "--workload", "cnn-dp", "--budget", "30", "--json", "-")
    second = p2("optimize", "--workload", "cnn-dp", "--budget", "30", "--json", "-")
    assert first.returncode == 0 and json.loads(first.stdout)["plan"] == json.loads(second.stdout)["plan"]


def test_a_recorded_trace_is_optimized(tmp_path):
    group = list(range(8))
    iteration = lambda t: [op("all_to_all_single", 8 * 4096, t + 0.001, t + 0.003, group),
                           op("all_reduce", 4 * 10**6, t + 0.004, t + 0.009, group)]
    for rank in (0, 1):
        path = tmp_path / f"trace.rank{rank}.json"
        path.write_text(json.dumps(trace(iteration(0.0), iteration(0.01), iteration(0.02), rank=rank,
                                         world_size=8)))
    result = p2("optimize", "--trace", str(tmp_path / "trace.rank0.json"), "--trace",
                str(tmp_path / "trace.rank1.json"), "--budget", "2", "--json", str(tmp_path / "o.json"))
    assert result.returncode == 0, result.stderr
    data = json.loads((tmp_path / "o.json").read_text())
    assert data["measured_iteration_seconds"] == pytest.approx(0.01)
    assert len(data["plan"]["ops"]) == 2
    assert 0 < data["bound_iteration_seconds"] == data["bound"]["seconds"] == data["plan"]["bound_iteration_seconds"]
    assert "the lower bound: " in result.stdout


def test_a_traced_job_in_bf16_and_int64_gets_a_plan_of_its_ops(tmp_path):
    """FSDP-style bf16 gathers and reduce-scatters and an int64 all-to-all of indices (issue 32)."""
    group = list(range(4))
    iteration = lambda t: [dict(op("all_gather_into_tensor", 2 * 4 * 50_000, t + 0.001, t + 0.003, group),
                                dtype="bfloat16"),
                           dict(op("all_to_all_single", 8 * 4 * 1024, t + 0.004, t + 0.005, group), dtype="int64"),
                           dict(op("reduce_scatter_tensor", 2 * 4 * 50_000, t + 0.006, t + 0.009, group),
                                dtype="bfloat16")]
    paths = []
    for rank in group:
        paths += ["--trace", str(tmp_path / f"trace.rank{rank}.json")]
        (tmp_path / f"trace.rank{rank}.json").write_text(json.dumps(
            trace(iteration(0.0), iteration(0.01), iteration(0.02), rank=rank, world_size=4)))
    result = p2("optimize", *paths, "--budget", "1", "--plan", str(tmp_path / "plan.json"))
    assert result.returncode == 0, result.stderr
    plan = Plan.parse((tmp_path / "plan.json").read_text())
    assert [(o.key.kind, o.key.dtype, o.key.nbytes) for o in plan.ops] == [
        ("all_gather", "bfloat16", 400_000), ("all_to_all", "int64", 32_768), ("reduce_scatter", "bfloat16", 400_000)]
    plan.ops[0].validate(50_000)
    plan.ops[1].validate(4 * 1024)
    plan.ops[2].validate(50_000)


@pytest.mark.parametrize("args, message", [
    ([], "give one of --workload NAME or --trace FILE"),
    (["--workload", "bert"], "unknown workload 'bert'"),
    (["--workload", "fsdp", "--topology", "nowhere"], "unknown topology 'nowhere'"),
    (["--trace", "missing.json"], "trace file missing.json does not exist"),
    (["--workload", "fsdp", "--budget", "0"], "--budget"),
    (["--workload", "fsdp", "--microbatches", "4"], "--microbatches applies to the pipeline workloads"),
    (["--workload", "pipeline-gpt", "--topology", "gcp-v100-2n"], "has 2 of 8; pass a larger --topology"),
    (["--workload", "pipeline-gpt", "--pipeline-schedule", "zigzag"], "--pipeline-schedule"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path):
    result = p2("optimize", *args)
    assert result.returncode == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_trace_larger_than_the_topology_is_refused(tmp_path):
    path = tmp_path / "t.json"
    big = lambda t: [op("all_reduce", 400, t, t + 0.001, list(range(64)))]
    path.write_text(json.dumps(trace(big(0.0), big(0.01), big(0.02), world_size=64)))
    result = p2("optimize", "--trace", str(path))
    assert result.returncode == 2 and "at least 64" in result.stderr


def test_a_pipeline_workload_schedules_its_stages_side_by_side():
    result = p2("optimize", "--workload", "pipeline-gpt", "--budget", "0.5", "--json", "-")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["workload"] == "pipeline-gpt" and data["topology"] == "emulated-4x4"
    assert "eager-1f1b x 8 micro-batches" in data["description"]
    systems = {s["name"]: s for s in data["systems"]}
    assert list(systems) == SYSTEM_NAMES
    # four stages on four streams: less than their compute one after another (8 x 4 x (250 + 500) ms), which
    # is what one compute stream would take before any transfer
    for system in systems.values():
        assert 0 < system["iteration_seconds"] < 24.0 and 0 <= system["compute_idle_fraction"] < 1
        assert {o["op"].split(":")[0] for o in system["options"]} == {"0>1", "1>0", "1>2", "2>1", "2>3", "3>2"}
    assert systems["Syndicate"]["iteration_seconds"] <= systems["FIFO"]["iteration_seconds"] * (1 + 1e-9)
    ops = data["plan"]["ops"]
    assert len(ops) == 6 * 8 and {op["kind"] for op in ops} == {"broadcast"}
