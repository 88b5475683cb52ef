"""A rank of the NIC-binding test (run by ``p2 cluster run`` on an emulated cluster).

It installs a plan whose all_reduce runs on channel 1 and names no interface
for it (as the service's plans do), runs the op, checks the sum, and prints
``NIC <json>``: the local addresses of this node's established TCP
connections and the node's own NIC addresses (``P2_CHANNEL_ADDRS``)."""

from __future__ import annotations

import json
import os
import socket
import struct

import torch
import torch.distributed as dist

import enforcer
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.motif import comm_op, on_channel
from optimizer_service.plan.op_plan import OpKey, OpPlan
from optimizer_service.plan.plan import Plan

ELEMENTS = 1 << 16


def established_local_addresses() -> set[str]:
    """Local IPv4 addresses of the namespace's established TCP connections (``/proc/net/tcp``)."""
    addresses = set()
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        fields = line.split()
        local, state = fields[1], fields[3]
        if state == "01":           # TCP_ESTABLISHED
            addresses.add(socket.inet_ntoa(struct.pack("<I", int(local.split(":")[0], 16))))
    return addresses


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
    main()
