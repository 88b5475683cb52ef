"""Resharding programs built by hand, and what each rank runs in the multiproc resharding tests.

The builders here are a deliberately small stand-in for the planner (no
topology, no load balance): grid layouts of a tensor on a 2-D mesh
(``R``, ``S0``, ``S1``, ``S01`` per tensor dimension, ceil-sized chunks so
uneven shapes leave short or empty tail shards), unit tasks as the
intersections of each unique source box with each unique destination box,
senders rotated over the replicas, receivers grouped by host (``rank //
per_host``). Programs travel to the ranks as text (the contract's form).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from enforcer.comm.subgroups import GroupCache
from enforcer.reshard.resharder import Resharder
from optimizer_service.plan.resharding import Box, ReshardProgram, ReshardTask, Strategy

ALL = tuple(Strategy)


def chunk(n: int, parts: int, index: int) -> tuple[int, int]:
    size = -(-n // parts)
    start = min(n, index * size)
    return start, min(n, start + size)


def grid_boxes(shape: tuple[int, ...], mesh: list[list[int]], spec: tuple[str, ...]) -> dict[int, Box]:
    """The box each device of ``mesh`` holds under ``spec`` (one of R, S0, S1, S01 per dimension)."""
    rows, cols = len(mesh), len(mesh[0])
    boxes = {}
    for i, row in enumerate(mesh):
        for j, rank in enumerate(row):
            starts, stops = [], []
            for n, token in zip(shape, spec):
                a, b = {"R": (0, n), "S0": chunk(n, rows, i), "S1": chunk(n, cols, j),
                        "S01": chunk(n, rows * cols, i * cols + j)}[token]
                starts.append(a)
                stops.append(b)
            boxes[rank] = Box(tuple(starts), tuple(stops))
    return boxes


def make_program(shape: tuple[int, ...], sources: dict[int, Box], destinations: dict[int, Box],
                 strategies: tuple[Strategy, ...], *, per_host: int = 2, partitions: int = 3) -> ReshardProgram:
    """Unit tasks (each unique source box ∩ each unique destination box), strategies cycled over the tasks."""
    unique_sources: dict[Box, list[int]] = {}
    for rank, box in sorted(sources.items()):
        unique_sources.setdefault(box, []).append(rank)
    unique_destinations: dict[Box, list[int]] = {}
    for rank, box in sorted(destinations.items()):
        unique_destinations.setdefault(box, []).append(rank)
    tasks = []
    for source, holders in unique_sources.items():
        for destination, receivers in unique_destinations.items():
            piece = source.intersect(destination)
            if piece.empty:
                continue
            hosts: dict[int, list[int]] = {}
            for rank in receivers:
                hosts.setdefault(rank // per_host, []).append(rank)
            order = len(tasks)
            tasks.append(ReshardTask(order, piece, strategies[order % len(strategies)], holders[order % len(holders)],
                                     tuple(tuple(h) for h in hosts.values()), partitions))
    return ReshardProgram(tuple(shape), sources, destinations, tuple(tasks), algorithm="by-hand")


def grid_program(shape, src_mesh, src_spec, dst_mesh, dst_spec, strategies=ALL, **kwargs) -> ReshardProgram:
    return make_program(tuple(shape), grid_boxes(shape, src_mesh, src_spec), grid_boxes(shape, dst_mesh, dst_spec),
                        tuple(strategies), **kwargs)


def global_tensor(shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """The same full tensor on every rank: random bits in every mantissa (floats), large integers (int64)."""
    gen = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)
    return torch.randint(-2 ** 40, 2 ** 40, shape, generator=gen, dtype=torch.int64).to(dtype)


def index_of(box: Box) -> tuple[slice, ...]:
    return tuple(slice(a, b) for a, b in zip(box.starts, box.stops))


def check_programs(cases: list[tuple[str, str]], repeats: int = 2) -> dict[str, int]:
    """Run every (program text, dtype name) ``repeats`` times; every destination
    must hold exactly its box of the global tensor. Sources pass their shard
    alternately as a view of the global tensor (often not contiguous) and as a
    contiguous copy. Returns counts of what was checked on this rank."""
    rank = dist.get_rank()
    groups = GroupCache()
    counts = {"received": 0, "sent": 0, "idle": 0}
    for case, (text, dtype_name) in enumerate(cases):
        program = ReshardProgram.parse(text)
        dtype = getattr(torch, dtype_name)
        full = global_tensor(program.shape, dtype, seed=case)
        resharder = Resharder(program, groups=groups)
        for attempt in range(repeats):
            local = None
            if rank in program.sources:
                local = full[index_of(program.sources[rank])]
                local = local.clone() if attempt % 2 else local
            got = resharder(local, dtype=dtype)
            where = f"rank {rank}, case {case} ({dtype_name}, run {attempt}):\n{text}"
            if rank in program.destinations:
                want = full[index_of(program.destinations[rank])]
                assert got is not None and got.dtype == dtype and tuple(got.shape) == tuple(want.shape), where
                if not torch.equal(got, want):
                    raise AssertionError(f"{where}\nwrong slice: got {got.flatten()[:6].tolist()} "
                                         f"want {want.flatten()[:6].tolist()}")
                counts["received"] += 1
            else:
                assert got is None, where
                counts["sent" if rank in program.sources else "idle"] += 1
    return counts


def check_input_errors_timing_and_cache(text: str) -> dict:
    """On one program: a wrong shard and a missing dtype fail with one line before
    any message; the world still works after; ``run_timed`` and ``reshard``'s cache."""
    from enforcer.reshard import api as reshard_api
    from optimizer_service.errors import InvalidInputError

    rank = dist.get_rank()
    program = ReshardProgram.parse(text)
    full = global_tensor(program.shape, torch.float32)
    resharder = Resharder(program)
    found = {}
    if rank in program.sources:
        box = program.sources[rank]
        wrong = torch.zeros(*box.shape, 1)
        try:
            resharder(wrong)
        except InvalidInputError as error:
            found["wrong_shape"] = str(error)
    if rank in program.destinations:
        try:
            resharder(None)
        except InvalidInputError as error:
            found["no_dtype"] = str(error)
    local = full[index_of(program.sources[rank])] if rank in program.sources else None
    out = None
    if rank in program.destinations:
        out = torch.full(program.destinations[rank].shape, -1.0)
    seconds = resharder.run_timed(local, 3, out=out, dtype=torch.float32)
    found["seconds"] = seconds
    if out is not None:
        found["timed_ok"] = bool(torch.equal(out, full[index_of(program.destinations[rank])]))
    # reshard(): the same Resharder for the same program object and for an equal, re-parsed one.
    for again in (program, program, ReshardProgram.parse(text)):
        got = reshard_api.reshard(local, again, dtype=torch.float32)
        if rank in program.destinations:
            assert torch.equal(got, full[index_of(program.destinations[rank])])
        else:
            assert got is None
    found["cached"] = len(reshard_api._CACHE.by_text)
    # Point-to-point over a group of its own (the default group's ranks, another communicator).
    other = dist.new_group(list(range(dist.get_world_size())))
    got = Resharder(program, other)(local, dtype=torch.float32)
    found["own_group_ok"] = got is None or bool(torch.equal(got, full[index_of(program.destinations[rank])]))
    return found


def planner_programs(cases: list[tuple], strategies=None, algorithms=None) -> list[tuple[str, str]]:
    """``(program text, dtype)`` planned by :func:`optimizer_service.resharding.planner.plan_resharding`
    on :data:`TOPOLOGY` for every case ``(shape, src spec, src mesh, dst spec, dst mesh, dtype)``,
    every strategy and every algorithm (defaults: all)."""
    from optimizer_service.hardware.topology import Topology
    from optimizer_service.resharding.planner import ALGORITHMS, plan_resharding

    topology = Topology.from_yaml(TOPOLOGY)
    found = []
    for shape, src_spec, src_mesh, dst_spec, dst_mesh, dtype_name in cases:
        element_bytes = getattr(torch, dtype_name).itemsize
        for strategy in strategies or ALL:
            for algorithm in algorithms or ALGORITHMS:
                plan = plan_resharding(shape, src_spec, src_mesh, dst_spec, dst_mesh, topology, algorithm=algorithm,
                                       strategy=strategy, element_bytes=element_bytes)
                found.append((str(plan.program), dtype_name))
    return found


#: 4 hosts x 2 devices (host = rank // 2), a slow NIC and little latency so
#: broadcasts of large slices are planned with several partitions.
TOPOLOGY = """
name: test-4x2
levels:
  - {name: node, cardinality: 4}
  - {name: gpu, cardinality: 2}
links:
  - {name: nvlink, levels: [gpu], bandwidth: 100GB/s, latency: 1us, shared_by: 1}
  - {name: nic, levels: [node], bandwidth: 25MB/s, latency: 1us, shared_by: 2}
"""


def check_dtensors(cases: list[tuple], uneven: tuple) -> dict:
    """DTensors on a 2x2 source mesh moved to 2-D and 1-D destination meshes by
    programs the planner makes from ``spec_from_placements``/``mesh_ranks`` (on
    every rank: without a clock it is deterministic); the result is a DTensor
    whose shards (against ``distribute_tensor``) and ``full_tensor()`` are exact.
    ``uneven``: a nested ``S^01`` case every rank must refuse alike."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    from enforcer.reshard.api import mesh_ranks, reshard_dtensor, spec_from_placements
    from optimizer_service.errors import InvalidInputError
    from optimizer_service.hardware.topology import Topology
    from optimizer_service.resharding.mesh import Mesh
    from optimizer_service.resharding.planner import plan_resharding

    def placements(names):
        return [Replicate() if n == "R" else Shard(int(n[1:])) for n in names]

    def plan(shape, src, src_placements, dst, dst_placements, dtype, strategy="broadcast"):
        return plan_resharding(shape, spec_from_placements(src_placements, len(shape)), Mesh.grid(mesh_ranks(src)),
                               spec_from_placements(dst_placements, len(shape)), Mesh.grid(mesh_ranks(dst)),
                               topology, strategy=strategy, element_bytes=dtype.itemsize).program

    topology = Topology.from_yaml(TOPOLOGY)
    rank = dist.get_rank()
    meshes = {"2x2a": DeviceMesh("cpu", torch.tensor([[0, 1], [2, 3]])),
              "2x2b": DeviceMesh("cpu", torch.tensor([[4, 5], [6, 7]])),
              "1x3b": DeviceMesh("cpu", torch.tensor([4, 5, 6]))}
    checked = {"shards": 0, "full": 0, "none": 0, "refused": ""}
    for case, (shape, src_names, dst_key, dst_names, dtype_name) in enumerate(cases):
        dtype = getattr(torch, dtype_name)
        full = global_tensor(shape, dtype, seed=len(shape))
        src, dst = meshes["2x2a"], meshes[dst_key]
        source = distribute_tensor(full, src, placements(src_names))
        program = plan(shape, src, source.placements, dst, placements(dst_names), dtype, ALL[case % len(ALL)].value)
        moved = reshard_dtensor(source, dst, placements(dst_names), program)
        if rank not in mesh_ranks_flat(dst):
            assert moved is None
            checked["none"] += 1
            continue
        assert tuple(moved.placements) == tuple(placements(dst_names)) and moved.device_mesh is dst
        assert torch.equal(moved.to_local(), distribute_tensor(full, dst, placements(dst_names)).to_local())
        checked["shards"] += 1
        assert torch.equal(moved.full_tensor(), full)
        checked["full"] += 1
    shape, src_names, dst_key, dst_names = uneven
    source = distribute_tensor(global_tensor(shape, torch.float32), meshes["2x2a"], placements(src_names))
    program = plan(shape, meshes["2x2a"], source.placements, meshes[dst_key], placements(dst_names), torch.float32)
    try:
        reshard_dtensor(source, meshes[dst_key], placements(dst_names), program)
    except InvalidInputError as error:
        checked["refused"] = str(error)
    return checked


def mesh_ranks_flat(device_mesh) -> list[int]:
    return [int(r) for r in device_mesh.mesh.flatten().tolist()]


HOST_ORDER_PROGRAM = """\
reshard 2x4096 element_bytes=4 algorithm=- predicted=0.0
src 0 [0:1,0:4096]
src 1 [1:2,0:4096]
dst 2 [0:1,0:4096]
dst 3 [1:2,0:4096]
task 0 [0:1,0:4096] send-recv K=1 from 0 to 2
task 1 [1:2,0:4096] broadcast K=2 from 1 to 3 after 0"""


def check_host_order(marker_dir: str, runs: int = 2) -> list[bool]:
    """Task 1 (rank 1 → 3) follows task 0 (rank 0 → 2) on their hosts (its
    ``after``), though the two share no rank. Rank 2 comes late to every run and
    leaves a marker file the moment task 0 has arrived; rank 1 notes, per run,
    whether that marker was there when it began to send. Every destination is
    checked. Returns rank 1's notes (empty elsewhere)."""
    import os
    import time

    rank = dist.get_rank()
    program = ReshardProgram.parse(HOST_ORDER_PROGRAM)
    full = global_tensor(program.shape, torch.float32)
    resharder = Resharder(program)
    notes: list[bool] = []
    run = [0]

    def marker() -> str:
        return os.path.join(marker_dir, f"task0-arrived-run{run[0]}")

    receive, send = resharder._receive, resharder._send

    def receive_and_mark(step, target):
        receive(step, target)
        if step.task.order == 0:
            open(marker(), "w").close()

    def note_and_send(step, local):
        if step.task.order == 1:
            notes.append(os.path.exists(marker()))
        send(step, local)

    resharder._receive, resharder._send = receive_and_mark, note_and_send
    for run[0] in range(runs):
        dist.barrier()
        if rank == 2:
            time.sleep(0.3)        # without the host-level order, task 1 would be long done by now
        local = full[index_of(program.sources[rank])] if rank in program.sources else None
        got = resharder(local, dtype=torch.float32)
        if rank in program.destinations:
            assert torch.equal(got, full[index_of(program.destinations[rank])]), f"rank {rank}, run {run[0]}"
    return notes
