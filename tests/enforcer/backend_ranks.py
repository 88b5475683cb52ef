"""What each rank runs in the backend tests (imported by spawned ranks)."""

from __future__ import annotations

import json
import os

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc

import enforcer


def iterations(count: int, mark_steps: bool) -> dict:
    """``count`` identical iterations after one setup op; the exported trace."""
    rank = dist.get_rank()
    dist.broadcast(torch.zeros(5), src=0)                     # setup, before the first iteration
    if mark_steps:
        enforcer.step()
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    if mark_steps:
        enforcer.attach(optimizer)          # optimizer.step() now marks the boundary
    for _ in range(count):
        a = torch.full((1000,), float(rank))
        work = dist.all_reduce(a, async_op=True)
        b = torch.empty(dist.get_world_size() * 7, dtype=torch.float64)
        dist.all_gather_into_tensor(b, torch.ones(7, dtype=torch.float64))
        work.wait()
        if rank == 0:
            dist.send(torch.ones(3), 1)
        elif rank == 1:
            dist.recv(torch.empty(3), 0)
        optimizer.step()
    path = enforcer.export_trace(os.path.join(os.environ["P2_TEST_DIR"], f"trace{rank}.json"))
    return json.loads(path.read_text())


def bypasses() -> dict:
    """A functional collective (intercepted) and a raw dispatcher op (bypasses)."""
    world = dist.group.WORLD
    fc.wait_tensor(fc.all_gather_tensor(torch.ones(3), 0, world))
    torch.ops.c10d.barrier.default(torch.empty(0), world.boxed(), [], -1).wait()
    torch.ops.c10d.barrier.default(torch.empty(0), world.boxed(), [], -1).wait()
    gloo = dist.new_group(backend="gloo")                      # not ours: never counted
    torch.ops.c10d.barrier.default(torch.empty(0), gloo.boxed(), [], -1).wait()
    return {"bypassed": enforcer.bypass_counts(), "metrics": enforcer.metrics_text(),
            "ops": enforcer.trace()["op_counts"]}


def premul_sums() -> dict:
    """all_reduce and reduce_scatter with PREMUL_SUM on the p2enforcer world and on plain gloo."""
    rank = dist.get_rank()
    out = {}
    tensor = torch.full((4,), float(rank + 1))
    dist.all_reduce(tensor, op=dist._make_nccl_premul_sum(2.5))
    out["double"] = tensor.tolist()
    tensor = torch.full((4,), float(rank + 1))
    dist.all_reduce(tensor, op=dist._make_nccl_premul_sum(torch.tensor([0.5])))
    out["tensor"] = tensor.tolist()
    output = torch.empty(2)
    dist.reduce_scatter_tensor(output, torch.full((6,), float(rank + 1)), op=dist._make_nccl_premul_sum(3.0))
    out["reduce_scatter"] = output.tolist()
    for name, group, values in (("integer", None, torch.ones(4, dtype=torch.int64)),
                                ("gloo", dist.new_group(backend="gloo"), torch.ones(4))):
        try:
            dist.all_reduce(values, op=dist._make_nccl_premul_sum(2.0), group=group)
            out[name] = "no error"
        except Exception as error:  # noqa: BLE001 — the message is the result
            out[name] = f"{type(error).__name__}: {error}"
    return out
