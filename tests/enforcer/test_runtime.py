"""Multiproc (loopback): ops under a plan — segmented, splined, tree and ring all-reduce, two
channels, reordered sequence numbers — give exactly plain gloo's results, without deadlock."""

import pytest

from tests.enforcer import plan_ranks
from tests.enforcer.impls import IMPLS, impl_env
from tests.support.multiproc import run_world

pytestmark = [pytest.mark.multiproc, pytest.mark.slow]


@pytest.mark.parametrize("world,reverse,channels,async_all", [
    (4, False, 1, True),
    (4, True, 2, True),      # plan order is the reverse of submission order
    (4, True, 2, False),     # ... and the program waits for op 0 before it submits the rest
    (3, False, 2, True),
])
@pytest.mark.parametrize("impl", IMPLS)
def test_planned_ops_equal_plain_gloo(world, reverse, channels, async_all, impl):
    results = run_world(world, plan_ranks.under_plan, reverse, channels, async_all, backend="p2enforcer",
                        timeout=240, env=impl_env(impl))
    for rank, result in enumerate(results):
        assert result["impl"] == impl and result["motifs"] > 0
        assert result["mismatches"] == [], f"rank {rank}"
        assert result["enforced"] == 3 * 6
        if async_all:
            # nothing is promoted: every channel ran its motifs in the plan's order, whatever
            # order the program submitted its ops in
            assert result["channel_orders"] and all(run == sorted(run) for run in result["channel_orders"])
        elif reverse:
            # op 0 (planned last) was waited on alone: the dispatcher held it back while it waited
            # for the ops planned first, then promoted it. (With every op submitted at once it may
            # find them all there and never wait.)
            assert result["waits"] > 0


@pytest.mark.parametrize("impl", IMPLS)
def test_a_plan_for_another_world_is_rejected_and_ops_still_work(impl):
    for result in run_world(2, plan_ranks.mismatched_plan, backend="p2enforcer", env=impl_env(impl)):
        assert result["error"] == "the plan is for a world of 3 ranks but this job has 2"
        assert result["equal"] and result["enforced"] == 0


@pytest.mark.parametrize("fits", [True, False])
@pytest.mark.parametrize("impl", IMPLS)
def test_plan_file_from_the_environment(tmp_path, fits, impl):
    path = tmp_path / "plan.json"
    path.write_text(plan_ranks.build_plan(3, True, 2, bad_world=not fits))
    for result in run_world(3, plan_ranks.plan_from_environment, backend="p2enforcer",
                            env={"P2_PLAN_FILE": str(path), **impl_env(impl)}):
        assert result["equal"]
        assert result["enforced"] == (6 if fits else 0)


@pytest.mark.parametrize("program", [
    "ReduceScatter 1 {0,1,2,3} {4,5,6,7}; AllReduce 1/4 {0,4} {1,5} {2,6} {3,7}; AllGather 1/4 {0,1,2,3} {4,5,6,7}",
    "Reduce 1 {0,1,2,3} {4,5,6,7}; AllReduce 1 {0,4}; Broadcast 1 {0,1,2,3} {4,5,6,7}",
])
@pytest.mark.parametrize("impl", IMPLS)
def test_a_p2_program_runs_as_a_plan(program, impl):
    assert run_world(8, plan_ranks.program_under_plan, program, 4099, backend="p2enforcer",
                     env=impl_env(impl)) == [True] * 8
