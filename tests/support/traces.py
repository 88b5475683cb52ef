"""Enforcer traces written by hand, in the format ``enforcer.trace.Tracer`` exports."""

from __future__ import annotations


def op(kind, nbytes, issued, completed, group=(0, 1), root=0):
    return {"kind": kind, "dtype": "float32", "bytes": nbytes, "group": list(group), "group_name": "0",
            "issued": issued, "completed": completed, "enforced": False, "root": root}



def trace(*iterations, rank=0, world_size=2, setup=()):
    """A trace dict as Tracer.to_dict writes it: ``iterations`` are lists of :func:`op` (setup ops get -1)."""
    ops, previous = [], None
    for index, ops_of in [(-1, setup)] + list(enumerate(iterations)):
        for seq, record in enumerate(ops_of):
            record = dict(record, iteration=index, seq=seq, group_seq=seq)
            record["gap"] = None if previous is None else record["issued"] - previous
            previous = record["completed"]
            ops.append(record)
    return {"format": "p2enforcer-trace", "version": 1, "rank": rank, "world_size": world_size,
            "boundaries": "step", "iterations": [], "ops": ops, "waits": [], "op_counts": {}, "bypassed": {}}
