"""A rank of the UCC NIC-binding test (run on an emulated cluster with ``P2_CHANNEL_BACKENDS=gloo,ucc``).

It installs a plan whose all_reduce runs on channel 1 (naming no interface: the node's second NIC,
``P2_CHANNEL_IFNAMES``), runs it, checks the sum, and prints ``NIC <json>``: the node's NIC
addresses, the backend channel 1 got, and the local addresses of the TCP connections this process
opened while the plan was built and run — the UCC channel's UCX connections."""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))     # the checkout, for tests.*

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import enforcer  # noqa: E402
from optimizer_service.plan.collective import Collective  # noqa: E402
from optimizer_service.plan.motif import comm_op, on_channel  # noqa: E402
from optimizer_service.plan.op_plan import OpKey, OpPlan  # noqa: E402
from optimizer_service.plan.plan import Plan  # noqa: E402

ELEMENTS = 1 << 16


def own_connections() -> set[tuple[str, int]]:
    """(local IPv4 address, socket inode) of this process's established TCP connections."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    found = set()
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        fields = line.split()
        local, state, inode = fields[1], fields[3], int(fields[9])
        if state == "01" and inode in inodes:
            found.add((socket.inet_ntoa(struct.pack("<I", int(local.split(":")[0], 16))), inode))
    return found


def main() -> None:
    dist.init_process_group("p2enforcer")
    world, rank = dist.get_world_size(), dist.get_rank()
    before = own_connections()
    motif = on_channel(comm_op(Collective.ALL_REDUCE, range(world), ELEMENTS), 1)
    op = OpPlan.of(OpKey(0, "all_reduce", ELEMENTS * 8, tuple(range(world))), motif)
    enforcer.install_plan(Plan(version=1, world_size=world, channels={0: None, 1: None}, ops=(op,)).to_json())
    tensor = torch.full((ELEMENTS,), rank + 1, dtype=torch.int64)
    dist.all_reduce(tensor)
    correct = bool(torch.all(tensor == world * (world + 1) // 2))
    new = sorted({address for address, _ in own_connections() - before})
    runtime = enforcer.group_of().runtime
    backends = sorted({peers.backend.name() for peers in runtime.channels[1].peers.values()})
    enforced = any(record["enforced"] for record in enforcer.trace()["ops"])
    print("NIC " + json.dumps({"correct": correct, "enforced": enforced, "backends": backends,
                               "nics": [a.split("/")[0] for a in os.environ["P2_CHANNEL_ADDRS"].split(",")],
                               "new_connections": new}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
