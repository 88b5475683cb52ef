"""A rank of the NIC-binding tests (run by ``p2 cluster run`` on an emulated cluster).

Without arguments it installs a plan whose all_reduce runs on channel 1 and
names no interface for it (as the service's plans do), runs the op, checks the
sum, and prints ``NIC <json>``: the local addresses of this node's established
TCP connections and the node's own NIC addresses (``P2_CHANNEL_ADDRS``).

With ``subgroups`` it makes a world-sized subgroup bound to the node's second
NIC (:class:`enforcer.comm.subgroups.GroupCache`, as the measuring jobs bind a
channel's programs), all-reduces on it and prints ``SUBGROUP <json>``: the local
addresses of the connections that appeared meanwhile, and whether the
environment changed. :func:`bound_subgroup` is the same on any world (the
loopback test runs it on ``lo``)."""

from __future__ import annotations

import json
import os
import socket
import struct
import sys

import torch
import torch.distributed as dist

import enforcer
from enforcer.comm.subgroups import GroupCache
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.motif import comm_op, on_channel
from optimizer_service.plan.op_plan import OpKey, OpPlan
from optimizer_service.plan.plan import Plan

ELEMENTS = 1 << 16


def established_connections() -> set[tuple[str, int]]:
    """Local IPv4 (address, port) of the namespace's established TCP connections (``/proc/net/tcp``)."""
    found = set()
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        fields = line.split()
        local, state = fields[1], fields[3]
        if state == "01":           # TCP_ESTABLISHED
            address, port = local.split(":")
            found.add((socket.inet_ntoa(struct.pack("<I", int(address, 16))), int(port, 16)))
    return found


def established_local_addresses() -> set[str]:
    """Local IPv4 addresses of the namespace's established TCP connections."""
    return {address for address, _port in established_connections()}


def bound_subgroup(interface: str) -> dict:
    """A world-sized subgroup bound to ``interface``: whether its all_reduce is right, the local
    addresses of the connections made meanwhile, and whether ``os.environ`` changed."""
    world, rank = dist.get_world_size(), dist.get_rank()
    environment = dict(os.environ)
    before = established_connections()
    groups = GroupCache(interface)
    groups.create([range(world)])
    tensor = torch.full((8,), float(rank + 1))
    dist.all_reduce(tensor, group=groups.get(range(world)))
    new = sorted({address for address, _port in established_connections() - before})
    return {"correct": bool(torch.all(tensor == world * (world + 1) / 2)), "new_connections": new,
            "environment_unchanged": dict(os.environ) == environment}


def unbindable_subgroup(interface: str) -> str:
    """What making a world-sized subgroup bound to ``interface`` raises ("" if nothing)."""
    try:
        GroupCache(interface).create([range(dist.get_world_size())])
    except RuntimeError as error:
        return str(error)
    return ""


def subgroups() -> None:
    dist.init_process_group("gloo")
    report = bound_subgroup(os.environ["P2_CHANNEL_IFNAMES"].split(",")[1])
    report["nics"] = [a.split("/")[0] for a in os.environ["P2_CHANNEL_ADDRS"].split(",")]
    print("SUBGROUP " + json.dumps(report), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    dist.init_process_group("p2enforcer")
    world, rank = dist.get_world_size(), dist.get_rank()
    motif = on_channel(comm_op(Collective.ALL_REDUCE, range(world), ELEMENTS), 1)
    op = OpPlan.of(OpKey(0, "all_reduce", ELEMENTS * 4, tuple(range(world))), motif)
    enforcer.install_plan(Plan(version=1, world_size=world, channels={0: None, 1: None}, ops=(op,)).to_json())
    tensor = torch.full((ELEMENTS,), float(rank + 1))
    dist.all_reduce(tensor)
    correct = bool(torch.all(tensor == world * (world + 1) / 2))
    enforced = any(record["enforced"] for record in enforcer.trace()["ops"])
    print("NIC " + json.dumps({"correct": correct, "enforced": enforced,
                               "nics": [a.split("/")[0] for a in os.environ["P2_CHANNEL_ADDRS"].split(",")],
                               "connected": sorted(established_local_addresses())}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    if sys.argv[1:] == ["subgroups"]:
        subgroups()
    else:
        main()
