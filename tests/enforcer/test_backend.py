"""The p2enforcer backend: registration, the trace, and counting what bypasses it."""

import json
import os
import subprocess
import sys

import pytest
from enforcer.trace import detect_period, trace_path
from tests.enforcer import backend_ranks
from enforcer.group import native
from tests.enforcer.impls import IMPLS, impl_env
from tests.support.multiproc import run_world

INIT_ONE_RANK = ("import torch.distributed as dist; "
                 "dist.init_process_group('p2enforcer', store=dist.HashStore(), rank=0, world_size=1); "
                 "import torch; t = torch.ones(3); dist.all_reduce(t); "
                 "import enforcer; print(type(enforcer.group_of()).__name__, t.tolist())")
GROUP_CLASS = {"cpp": "NativeGroup", "python": "EnforcerGroup"}


def python(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


@pytest.mark.parametrize("impl", IMPLS)
def test_torch_loads_the_backend_by_itself(impl):
    done = python(INIT_ONE_RANK, P2_ENFORCER_IMPL=impl)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [GROUP_CLASS[impl], "[1.0,", "1.0,", "1.0]"]


@pytest.mark.parametrize("impl", IMPLS)
def test_without_autoload_import_enforcer_registers_it(impl):
    refused = python(INIT_ONE_RANK.replace("import enforcer; ", ""), TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert refused.returncode != 0 and "P2ENFORCER" in refused.stderr.upper()
    done = python("import enforcer; " + INIT_ONE_RANK, TORCH_DEVICE_BACKEND_AUTOLOAD="0", P2_ENFORCER_IMPL=impl)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(GROUP_CLASS[impl])


def test_bad_inner_backend_is_one_clear_line():
    done = python(INIT_ONE_RANK, P2_INNER_BACKEND="cpu:carrier-pigeon")
    assert done.returncode != 0
    assert "P2_INNER_BACKEND: unknown inner backend 'carrier-pigeon' for cpu" in done.stderr


def test_detect_period_finds_the_shortest_repeat_after_a_setup_prefix():
    assert detect_period(list("xABCABCABC")) == (1, 3)
    assert detect_period(list("xABCABCAB")) == (1, 3)        # last iteration cut off
    assert detect_period(list("AAAA")) == (0, 1)
    assert detect_period(list("ABCD")) is None
    assert detect_period([]) is None


def test_trace_path_per_rank():
    assert str(trace_path("/t/run-{rank}.json", 3)) == "/t/run-3.json"
    assert str(trace_path("/t/run.json", 3)) == "/t/run.rank3.json"


IDLE_ONE_RANK = '''
import json, time, torch, torch.distributed as dist
import enforcer
with enforcer.idle():                       # no p2enforcer group yet: nothing to leave out
    pass
dist.init_process_group('p2enforcer', store=dist.HashStore(), rank=0, world_size=1)
t = torch.ones(3)
for pause in (0.0, 0.3):
    dist.all_reduce(t)
    enforcer.step()
    with enforcer.idle():
        time.sleep(pause)
dist.all_reduce(t)
enforcer.step()
print(json.dumps({"gaps": [op["gap"] for op in enforcer.trace()["ops"]], "cpu": enforcer.trace()["cpu"]}))
'''


@pytest.mark.parametrize("impl", IMPLS)
def test_a_pause_the_loop_declares_idle_is_not_the_next_iterations_compute(impl):
    done = python(IDLE_ONE_RANK, P2_ENFORCER_IMPL=impl)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert len(result["gaps"]) == 3 and max(result["gaps"][1:]) < 0.2
    assert [record["iteration"] for record in result["cpu"]] == [1, 2] and result["cpu"][1]["wall"] < 0.2


@pytest.mark.multiproc
@pytest.mark.parametrize("mark_steps", [True, False])
@pytest.mark.parametrize("impl", IMPLS)
def test_trace_records_every_op_with_iterations(tmp_path, mark_steps, impl):
    traces = run_world(3, backend_ranks.iterations, 4, mark_steps, backend="p2enforcer",
                       env={"P2_TEST_DIR": str(tmp_path), **impl_env(impl)})
    for rank, trace in enumerate(traces):
        assert trace["format"] == "p2enforcer-trace" and trace["rank"] == rank and trace["world_size"] == 3
        ops = trace["ops"]
        per_iteration = 3 if rank in (0, 1) else 2
        assert len(ops) == 1 + 4 * per_iteration
        assert trace["boundaries"] == ("step" if mark_steps else "detected")
        first = ops[1:1 + per_iteration]
        assert [o["kind"] for o in first][:2] == ["all_reduce", "all_gather_into_tensor"]
        assert first[0]["bytes"] == 4000 and first[0]["dtype"] == "float32"
        assert first[1]["bytes"] == 3 * 7 * 8 and first[1]["dtype"] == "float64"
        assert all(o["group"] == [0, 1, 2] for o in ops)
        for index, op in enumerate(ops[1:]):
            assert op["iteration"] == index // per_iteration + (1 if mark_steps else 0)
            assert op["seq"] == index % per_iteration
            assert op["completed"] is not None and op["completed"] >= op["issued"]
            assert op["gap"] is not None
        assert ops[0]["kind"] == "broadcast" and ops[0]["iteration"] == (0 if mark_steps else -1)
        assert [s["index"] for s in trace["iterations"]] == ([0, 1, 2, 3, 4] if mark_steps else [-1, 0, 1, 2, 3])
        # Every iteration a step closed after the first carries its CPU; all ranks name one host.
        assert trace["host"]["cores"] >= 1 and trace["host"]["id"] == traces[0]["host"]["id"]
        # the backend the default group passes ops through to (the service prices passthrough by it)
        assert trace["inner_backends"]["cpu"] == "gloo"
        assert [c["iteration"] for c in trace["cpu"]] == ([1, 2, 3, 4] if mark_steps else [])
        for record in trace["cpu"]:
            assert record["wall"] > 0 and record["process_cpu"] >= record["step_thread_cpu"] > 0


@pytest.mark.multiproc
def test_bypassing_ops_are_counted_per_kind_and_functional_collectives_are_not_bypasses():
    for result in run_world(2, backend_ranks.bypasses, backend="p2enforcer", env=impl_env("python")):
        assert result["bypassed"] == {"c10d.barrier": 2}
        assert result["ops"].get("all_gather_into_tensor") == 1     # one pair: the single op
        rank = result["metrics"].split('rank="', 1)[1].split('"', 1)[0]
        assert f'p2_rank_bypassed_total{{op="c10d.barrier",rank="{rank}"}} 2.0' in result["metrics"]


@pytest.mark.multiproc
@pytest.mark.skipif(not native.available(), reason=native.why_unavailable() or "built")
def test_nothing_bypasses_the_cpp_backend():
    """Raw dispatcher ops reach the C++ backend like every other route: traced, none bypassed."""
    for result in run_world(2, backend_ranks.bypasses, backend="p2enforcer", env=impl_env("cpp")):
        assert result["bypassed"] == {}
        assert result["ops"] == {"all_gather_into_tensor": 1, "barrier": 2}
        assert "p2_rank_bypassed_total{" not in result["metrics"]          # no sample: nothing bypassed


def _timeless(trace: dict) -> dict:
    """A trace without its clock readings (what must be equal across implementations)."""
    ops = [{k: v for k, v in op.items() if k not in ("issued", "completed", "gap")} for op in trace["ops"]]
    return {**{k: v for k, v in trace.items() if k not in ("started_unix", "iterations", "cpu")}, "ops": ops,
            "iterations": [(span["index"], span["ops"]) for span in trace["iterations"]],
            "cpu": [record["iteration"] for record in trace["cpu"]]}


@pytest.mark.multiproc
@pytest.mark.skipif(not native.available(), reason=native.why_unavailable() or "built")
def test_the_cpp_trace_is_the_python_trace(tmp_path):
    """The C++ ring buffer exports exactly what the Python tracer does (its twin), clock readings aside."""
    cpp = run_world(3, backend_ranks.iterations, 3, True, backend="p2enforcer",
                    env={"P2_TEST_DIR": str(tmp_path / "cpp"), **impl_env("cpp")})
    python = run_world(3, backend_ranks.iterations, 3, True, backend="p2enforcer",
                       env={"P2_TEST_DIR": str(tmp_path / "python"), **impl_env("python")})
    for rank in range(3):
        assert _timeless(cpp[rank]) == _timeless(python[rank])


@pytest.mark.multiproc
@pytest.mark.parametrize("impl", IMPLS)
def test_the_trace_keeps_the_newest_ops_and_counts_the_dropped(tmp_path, impl):
    traces = run_world(2, backend_ranks.iterations, 4, True, backend="p2enforcer",
                       env={"P2_TEST_DIR": str(tmp_path), "P2_TRACE_LIMIT": "5", **impl_env(impl)})
    for trace in traces:
        per_iteration = 3
        assert len(trace["ops"]) == 5 and trace["dropped_ops"] == 1 + 4 * per_iteration - 5
        assert [op["iteration"] for op in trace["ops"]] == [3, 3, 4, 4, 4]      # the newest five
        assert trace["op_counts"]["all_reduce"] == 4                            # counts include the dropped


@pytest.mark.multiproc
@pytest.mark.skipif(not native.available(), reason=native.why_unavailable() or "built")
def test_every_reduce_op_on_the_cpp_backend_including_premul_sum():
    """PREMUL_SUM, which gloo refuses, runs as a SUM scaled by the factor (a double or a tensor);
    AVG and the others are gloo's own (the passthrough test compares them with plain gloo)."""
    for result in run_world(3, backend_ranks.premul_sums, backend="p2enforcer", env=impl_env("cpp")):
        assert result["double"] == [2.5 * 6.0] * 4              # 2.5 * (1 + 2 + 3)
        assert result["tensor"] == [0.5 * 6.0] * 4
        assert result["reduce_scatter"] == [3.0 * 6.0] * 2
        assert result["integer"].startswith("RuntimeError") and "PREMUL_SUM needs floating-point" in result["integer"]
        assert result["gloo"].startswith("RuntimeError")        # plain gloo refuses it
