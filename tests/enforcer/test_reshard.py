"""Cross-mesh resharding executed on numbers (Zhuang et al. §2.2, §3.1): :mod:`enforcer.reshard.resharder`.

Pure tests check the pieces every rank computes alike (part bounds, the
subgroups a program needs, the input check). Multiproc tests run programs on
real gloo ranks over loopback — many programs per world launch — and every
destination rank must end with exactly its box of the global tensor,
bit-identical (``torch.equal``): every strategy alone and mixed, float32,
float64, int64 and bfloat16, 1-D to 3-D shapes, uneven shapes with empty
boxes, non-contiguous boxes, ranks in neither mesh, and a ``p2enforcer`` world.
"""

from __future__ import annotations

import pytest
import torch
from enforcer.reshard.resharder import check_local, gather_member_sets, host_order_tokens
from enforcer.reshard.strategies import GatherGroup, finishers, gather_groups, padded_part, split_even
from optimizer_service.errors import InvalidInputError
from optimizer_service.plan.resharding import Box, ReshardProgram, ReshardTask, Strategy
from tests.enforcer import reshard_ranks
from tests.enforcer.reshard_ranks import ALL, grid_program
from tests.support.multiproc import run_world

A = [[0, 1], [2, 3]]          # source mesh: hosts {0,1} and {2,3}
B = [[4, 5], [6, 7]]          # destination mesh: hosts {4,5} and {6,7}


def per_strategy(shape, src_mesh, src_spec, dst_mesh, dst_spec, dtype, **kwargs) -> list[tuple[str, str]]:
    """One program per strategy, and one cycling all four over its tasks."""
    programs = [grid_program(shape, src_mesh, src_spec, dst_mesh, dst_spec, (s,), **kwargs) for s in ALL]
    programs.append(grid_program(shape, src_mesh, src_spec, dst_mesh, dst_spec, ALL, **kwargs))
    return [(str(p), dtype) for p in programs]


def random_cases(seed: int, count: int) -> list[tuple[str, str]]:
    """``count`` random geometries on 8 ranks: disjoint meshes of random shapes and
    rank orders, random valid specs (a mesh dimension shards one tensor dimension
    at most), 1-D to 3-D shapes of 1..7, hosts of 1..3 ranks, K of 1..6, a random
    strategy sequence and dtype."""
    import random
    rng = random.Random(seed)
    shapes = [(1, 1), (1, 2), (2, 1), (2, 2), (1, 3), (3, 1), (1, 4)]
    cases = []
    while len(cases) < count:
        src_shape, dst_shape = rng.choice(shapes), rng.choice(shapes)
        if src_shape[0] * src_shape[1] + dst_shape[0] * dst_shape[1] > 8:
            continue
        ranks = rng.sample(range(8), 8)
        def mesh(shape, offset):
            return [ranks[offset + r * shape[1]: offset + (r + 1) * shape[1]] for r in range(shape[0])]
        def spec(ndim):
            tokens, free = [], ["S0", "S1", "S01"]
            for _ in range(ndim):
                token = rng.choice(["R", "R", *free])
                free = [t for t in free if not set(t[1:]) & set(token[1:])] if token != "R" else free
                tokens.append(token)
            return tuple(tokens)
        ndim = rng.randint(1, 3)
        shape = tuple(rng.randint(1, 7) for _ in range(ndim))
        strategies = tuple(rng.sample(ALL, rng.randint(1, len(ALL))))
        program = grid_program(shape, mesh(src_shape, 0), spec(ndim), mesh(dst_shape, src_shape[0] * src_shape[1]),
                               spec(ndim), strategies, per_host=rng.randint(1, 3), partitions=rng.randint(1, 6))
        cases.append((str(program), rng.choice(["float32", "float64", "int64", "bfloat16"])))
    return cases


# ---- pure ------------------------------------------------------------------------------------------------------


def test_even_split_covers_the_slice_and_drops_empty_parts():
    assert split_even(10, 3) == ((0, 4), (4, 7), (7, 10))
    assert split_even(2, 5) == ((0, 1), (1, 2))
    assert split_even(0, 4) == ()
    for n in range(0, 30):
        for k in range(1, 9):
            parts = split_even(n, k)
            assert [a for a, _ in parts[1:]] == [b for _, b in parts[:-1]]
            assert sum(b - a for a, b in parts) == n and all(b > a for a, b in parts)


def test_all_gather_parts_are_padded_and_the_padding_is_not_sent():
    assert padded_part(10, 4) == 3
    group = GatherGroup((4, 5, 6, 7), padded_part(10, 4))
    assert [group.bounds(10, i) for i in range(4)] == [(0, 3), (3, 6), (6, 9), (9, 10)]
    group = GatherGroup((4, 5, 6, 7), padded_part(2, 4))
    assert [group.bounds(2, i) for i in range(4)] == [(0, 1), (1, 2), (2, 2), (2, 2)]


def test_gather_groups_follow_hosts_for_local_and_all_receivers_for_global():
    task = ReshardTask(0, Box.parse("0:4"), Strategy.LOCAL_ALLGATHER, 0, ((5, 4), (6,)))
    assert gather_groups(task, 4) == (GatherGroup((4, 5), 2), GatherGroup((6,), 4))
    task = ReshardTask(0, Box.parse("0:4"), Strategy.GLOBAL_ALLGATHER, 0, ((5, 4), (6,)))
    assert gather_groups(task, 4) == (GatherGroup((4, 5, 6), 2),)
    assert gather_groups(ReshardTask(0, Box.parse("0:4"), Strategy.BROADCAST, 0, ((5, 4),)), 4) == ()


def test_subgroups_are_deduplicated_in_first_use_order_and_skip_singletons_and_empty_slices():
    def task(order, strategy, hosts, box="0:8"):
        return ReshardTask(order, Box.parse(box), strategy, 0, hosts)
    program = ReshardProgram(
        (8,), {0: Box.parse("0:8")}, {r: Box.parse("0:8") for r in (4, 5, 6, 7)},
        (task(0, Strategy.GLOBAL_ALLGATHER, ((6, 7), (5, 4))),
         task(1, Strategy.LOCAL_ALLGATHER, ((6, 7), (4, 5))),
         task(2, Strategy.LOCAL_ALLGATHER, ((5,), (6, 7))),
         task(3, Strategy.GLOBAL_ALLGATHER, ((4,), (5,)), box="3:3"),
         task(4, Strategy.BROADCAST, ((4, 5, 6, 7),))))
    assert gather_member_sets(program) == [(4, 5, 6, 7), (6, 7), (4, 5)]


def test_a_task_finishes_where_its_strategy_ends():
    hosts = ((5, 4), (6,))
    task = lambda strategy: ReshardTask(0, Box.parse("0:4"), strategy, 0, hosts)     # noqa: E731
    assert finishers(task(Strategy.BROADCAST)) == (6,)                   # the chain's end
    assert finishers(task(Strategy.SEND_RECV)) == (5, 4, 6)              # every receiver
    assert finishers(task(Strategy.LOCAL_ALLGATHER)) == (5, 6)           # one per host's gather group
    assert finishers(task(Strategy.GLOBAL_ALLGATHER)) == (6,)            # one gather group


def test_host_order_tokens_come_from_each_predecessors_finishers_once():
    program = ReshardProgram.parse("""reshard 8 element_bytes=4 algorithm=- predicted=0.0
src 0 [0:8]
src 1 [0:8]
dst 2 [0:8]
dst 3 [0:8]
task 0 [0:2] send-recv K=1 from 0 to 2|3
task 1 [2:4] broadcast K=1 from 1 to 3
task 2 [4:6] broadcast K=1 from 1 to 2|3 after 0,1
task 3 [6:8] broadcast K=1 from 0 to 3|2 after 2""")
    # task 2 waits (at its sender, rank 1) for task 0's receivers 2 and 3, and for task 1's end
    # (rank 3, already counted: it sends once, after the later task 1); task 3 for task 2's chain end.
    assert host_order_tokens(program) == {(2, 2): 0, (3, 2): 1, (3, 3): 2}
    unordered = ReshardProgram.parse(str(program).replace(" after 0,1", "").replace(" after 2", ""))
    assert host_order_tokens(unordered) == {}


@pytest.mark.multiproc
def test_a_task_waits_for_the_tasks_before_it_on_its_hosts_though_they_share_no_rank(tmp_path):
    notes = run_world(4, reshard_ranks.check_host_order, str(tmp_path))
    assert notes[1] == [True, True] and notes[0] == notes[2] == notes[3] == []


def test_a_wrong_local_shard_is_one_clear_line():
    program = grid_program((4, 6), A, ("R", "S01"), B, ("S0", "R"))
    check_local(program, 1, torch.zeros(4, 2))
    check_local(program, 5, None)                 # destinations pass nothing
    with pytest.raises(InvalidInputError, match=r"rank 1's local shard has shape \(4, 3\).*box \[0:4,2:4\]"):
        check_local(program, 1, torch.zeros(4, 3))
    with pytest.raises(InvalidInputError, match="rank 2 is a source.*pass its local shard") as error:
        check_local(program, 2, None)
    assert "\n" not in str(error.value)


def test_hand_built_programs_are_valid_contract_values_and_cover_every_destination():
    program = grid_program((6, 5, 4), A, ("S0", "R", "S1"), B, ("R", "S01", "R"))
    assert ReshardProgram.parse(str(program)) == program
    for rank, box in program.destinations.items():
        covered = sum(task.box.elements for task in program.tasks if rank in task.receivers)
        assert covered == box.elements, rank
    assert any(box.empty for box in program.destinations.values())     # 5 over 4 devices: one is empty


# ---- multiproc -------------------------------------------------------------------------------------------------

GLOO_CASES = [
    # Figure 2, task 1 and the way back (task 2's direction): 4x4, every dtype.
    *per_strategy((4, 4), A, ("R", "S01"), B, ("S0", "R"), "float32"),
    *per_strategy((4, 4), B, ("S0", "R"), A, ("R", "S01"), "int64"),
    *[(str(grid_program((4, 4), A, ("R", "S01"), B, ("S0", "R"))), d) for d in ("float64", "bfloat16")],
    # 3-D, uneven: 5 over 4 devices leaves a destination with an empty box.
    *per_strategy((6, 5, 4), A, ("S0", "R", "S1"), B, ("R", "S01", "R"), "float64"),
    # An empty source box (3 rows over 4 devices), non-contiguous boxes on both sides.
    *per_strategy((3, 4, 2), A, ("S01", "R", "R"), B, ("S1", "S0", "R"), "int64"),
    # Ranks 2 and 3 in neither mesh; a fully replicated destination (chains of 4 over 2 hosts).
    *per_strategy((7, 3), [[0, 1]], ("S1", "R"), B, ("R", "R"), "bfloat16"),
    # More broadcast partitions than elements; a 1-D tensor.
    *per_strategy((2,), [[0]], ("R",), B, ("R",), "float32", partitions=5),
    # Several elements per part, transposed layout.
    *per_strategy((64, 48), A, ("S0", "S1"), B, ("S1", "S0"), "float32", partitions=8),
    # Three single-device hosts to a 2x2 mesh; receivers of one host in reverse rank order.
    *per_strategy((5, 3), [[0], [1], [2]], ("S0", "R"), [[5, 4], [7, 6]], ("R", "S1"), "float64"),
    *random_cases(seed=18, count=40),
]


@pytest.mark.multiproc
@pytest.mark.slow
def test_every_strategy_delivers_exactly_each_destination_slice_on_gloo():
    counts = run_world(8, reshard_ranks.check_programs, GLOO_CASES)
    destinations = sum(len(ReshardProgram.parse(text).destinations) for text, _ in GLOO_CASES)
    assert sum(c["received"] for c in counts) == 2 * destinations
    assert counts[2]["idle"] > 0 and counts[3]["idle"] > 0       # ranks in neither mesh took part in nothing


ENFORCER_CASES = [
    *per_strategy((6, 5), [[0, 1]], ("S1", "R"), [[2, 3]], ("R", "S1"), "float32"),
    *per_strategy((4, 3, 2), [[0], [1]], ("S0", "R", "R"), [[2, 3]], ("R", "R", "S1"), "int64", per_host=1),
]


@pytest.mark.multiproc
@pytest.mark.slow
def test_programs_run_on_a_p2enforcer_world_and_bad_input_fails_before_any_message():
    program = grid_program((6, 4), [[0, 1]], ("S1", "R"), [[2, 3]], ("R", "S1"), (Strategy.BROADCAST,))
    counts, found = zip(*run_world(4, _enforcer_world, ENFORCER_CASES, str(program), backend="p2enforcer"))
    destinations = sum(len(ReshardProgram.parse(text).destinations) for text, _ in ENFORCER_CASES)
    assert sum(c["received"] for c in counts) == 2 * destinations
    for rank in (0, 1):
        assert found[rank]["wrong_shape"].startswith(f"rank {rank}'s local shard has shape (3, 4, 1)")
        assert "\n" not in found[rank]["wrong_shape"] and "no_dtype" not in found[rank]
    for rank in (2, 3):
        assert "pass dtype=" in found[rank]["no_dtype"] and "wrong_shape" not in found[rank]
        assert found[rank]["timed_ok"]
    for rank in range(4):
        assert len(found[rank]["seconds"]) == 3 and all(s >= 0 for s in found[rank]["seconds"])
        assert found[rank]["cached"] == 1 and found[rank]["own_group_ok"]


def _enforcer_world(cases, text):
    import torch.distributed as dist
    assert dist.get_backend() == "p2enforcer"
    return reshard_ranks.check_programs(cases), reshard_ranks.check_input_errors_timing_and_cache(text)


DTENSOR_CASES = [
    ((8, 6), ["S0", "S1"], "2x2b", ["R", "S0"], "float32"),
    ((8, 6), ["S0", "S0"], "1x3b", ["S1"], "float64"),        # S^01 on an even size: nested == flat
    ((5, 3, 2), ["S1", "R"], "1x3b", ["S0"], "int64"),        # uneven: 5 rows over 3 ranks
    ((4, 4), ["R", "R"], "2x2b", ["S1", "S0"], "bfloat16"),
]


@pytest.mark.multiproc
@pytest.mark.slow
def test_dtensors_move_between_device_meshes():
    uneven = ((5, 2), ["S0", "S0"], "2x2b", ["R", "R"])
    results = run_world(8, reshard_ranks.check_dtensors, DTENSOR_CASES, uneven)
    for rank, checked in enumerate(results):
        two_d, one_d = sum(c[2] == "2x2b" for c in DTENSOR_CASES), sum(c[2] == "1x3b" for c in DTENSOR_CASES)
        expected = (two_d if rank >= 4 else 0) + (one_d if rank in (4, 5, 6) else 0)
        assert checked["shards"] == checked["full"] == expected, rank
        assert checked["none"] == len(DTENSOR_CASES) - expected
        assert "nested" in checked["refused"] and "\n" not in checked["refused"], rank


def test_dtensor_placements_map_to_the_papers_specs():
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.placement_types import Partial

    from enforcer.reshard.api import spec_from_placements
    assert spec_from_placements([Shard(0)], 3) == "S^0RR"
    assert spec_from_placements([Replicate(), Shard(1)], 3) == "RS^1R"
    assert spec_from_placements([Shard(2), Shard(0)], 3) == "S^1RS^0"
    assert spec_from_placements([Shard(0), Shard(0)], 2) == "S^01R"
    assert spec_from_placements([Shard(-1), Replicate()], 2) == "RS^0"
    assert spec_from_placements([Replicate(), Replicate()], 2) == "RR"
    with pytest.raises(InvalidInputError, match="Partial.*Replicate") as error:
        spec_from_placements([Partial(), Shard(0)], 2)
    assert "\n" not in str(error.value)
    with pytest.raises(InvalidInputError, match="shards dimension 2 of a 2-D"):
        spec_from_placements([Shard(2)], 2)
    with pytest.raises(InvalidInputError, match="1-D and 2-D meshes"):
        spec_from_placements([Shard(0)] * 3, 2)


PLANNED = [
    # Chains over 2 hosts of 2, several partitions per broadcast; ranks 2 and 3 idle.
    ((512, 256), "S^1R", "[[0,1]]", "RR", "[[4,5],[6,7]]", "float32"),
    # Uneven 1-D: 10 over 4 sources (3,3,3,1), 5 rows per destination host.
    ((10,), "S^01", "[[0,1],[2,3]]", "S^0", "[[4,5],[6,7]]", "float64"),
    # 3-D, uneven, an empty destination box.
    ((6, 5, 4), "S^0RS^1", "[[0,1],[2,3]]", "RS^01R", "[[4,5],[6,7]]", "int64"),
    # A 1-D source mesh across hosts; a destination mesh listed out of rank order.
    ((5, 3), "S^0R", "[0,1,2]", "RS^1", "[[5,4],[7,6]]", "bfloat16"),
    # Figure 2's task 2 direction, and an empty source box.
    ((4, 4), "RS^01", "[[4,5],[6,7]]", "S^0R", "[[0,1],[2,3]]", "float32"),
    ((3, 4, 2), "S^01RR", "[[0,1],[2,3]]", "S^1S^0R", "[[4,5],[6,7]]", "int64"),
]


@pytest.mark.multiproc
@pytest.mark.slow
def test_planner_programs_of_every_strategy_and_algorithm_deliver_exact_slices():
    pytest.importorskip("optimizer_service.resharding.planner")
    from optimizer_service.resharding.planner import ALGORITHMS

    cases = reshard_ranks.planner_programs(PLANNED)
    assert len(cases) == len(PLANNED) * len(ALL) * len(ALGORITHMS)
    programs = [ReshardProgram.parse(text) for text, _ in cases]
    assert any(t.partitions > 1 for p in programs for t in p.tasks)            # pipelined chains are exercised
    assert any(len(t.receiver_hosts) > 1 and len(t.receiver_hosts[0]) > 1 for p in programs for t in p.tasks)
    counts = run_world(8, reshard_ranks.check_programs, cases)
    assert sum(c["received"] for c in counts) == 2 * sum(len(p.destinations) for p in programs)
