"""What each rank runs in the route tests: DTensor redistribute, functional collectives and FSDP2 (imported by spawned ranks)."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard

import enforcer
from optimizer_service.syndicate.rule_plan import plan_from_trace


#: How many of an iteration's results are the collectives' own (integer-valued, exact); the rest is FSDP2's.
EXACT = 6


def _iteration(mesh, model, optimizer, step: int) -> list[torch.Tensor]:
    """One iteration of every route; returns what it computed."""
    rank, size = dist.get_rank(), dist.get_world_size()
    local = torch.arange(8 * 6, dtype=torch.float32).reshape(8, 6) + 100 * rank + step
    gathered = DTensor.from_local(local, mesh, [Shard(0)]).redistribute(mesh, [Replicate()]).to_local()
    summed = DTensor.from_local(local, mesh, [Partial()]).redistribute(mesh, [Replicate()]).to_local()
    moved = DTensor.from_local(local, mesh, [Shard(0)]).redistribute(mesh, [Shard(1)]).to_local()   # gather + chunk on CPU
    exchanged = fc.wait_tensor(fc.all_to_all_single(local.flatten(), None, None, dist.group.WORLD))
    reduced = fc.wait_tensor(fc.all_reduce(local * 2, "sum", dist.group.WORLD))
    scattered = fc.wait_tensor(fc.reduce_scatter_tensor(local.repeat(size, 1), "sum", 0, dist.group.WORLD))
    batch = torch.arange(4 * 8, dtype=torch.float32).reshape(4, 8) / 10 + rank + step
    loss = model(batch).square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    params = [p.full_tensor().detach().clone() for p in model.parameters()]
    return [gathered, summed, moved, exchanged, reduced, scattered, loss.detach(), *params]


def routes(plan: bool, iterations: int = 2) -> dict:
    """``iterations`` in passthrough; with ``plan``, a rule plan from this rank's trace is
    installed and ``iterations`` more run under it. Results, which ops a plan ran, bypasses."""
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 4))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ours = dist.get_backend() == "p2enforcer"
    results = []
    for phase in range(2):
        if phase == 1 and plan and ours:
            enforcer.install_plan(plan_from_trace(enforcer.trace(), segments=2))
        for step in range(iterations):
            results.append([t.tolist() for t in _iteration(mesh, model, optimizer, 10 * phase + step)])
            if ours:
                enforcer.step()
    trace = enforcer.trace() if ours else {"ops": [], "bypassed": {}}
    return {"results": results, "bypassed": trace["bypassed"],
            "enforced": sorted({op["kind"] for op in trace["ops"] if op["enforced"]}),
            "kinds": sorted({op["kind"] for op in trace["ops"]}),
            "impl": enforcer.implementation() if ours else "gloo"}
