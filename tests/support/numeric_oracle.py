"""An oracle for lowered programs that executes them on numbers.

The tensor is cut into ``k`` equal chunks (``k`` = devices per reduction group,
the rows of P²'s state matrices). Every device holds a buffer: a list of chunk
labels and one vector of numbers per label. Steps act on buffers the way a
communication library acts on memory — positionally: AllReduce adds the
members' buffers element by element (whatever their labels), ReduceScatter
keeps the i-th block on the i-th member, AllGather concatenates in member
order, Reduce adds into the root, Broadcast copies the root's buffer. Like a
real executor, a device knows the labels of what it received and, after an
AllGather, lays the chunks out in label order (a local copy): P²'s semantics
say which chunks a device holds, not in which order a gather delivers them.

Nothing here reads state matrices or contributor sets: a semantically wrong
program shows up as wrong numbers, mismatched sizes, a chunk held twice, or a
buffer that is not the whole tensor at the end. Expected results come from the
parallelism matrix through this module's own (numpy) coordinate arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class OracleError(AssertionError):
    pass


@dataclass
class Buffer:
    labels: list[int]      # which chunk each row of ``data`` is
    data: np.ndarray       # (len(labels), chunk elements)


def run(steps, initial: np.ndarray, chunks: int) -> list[Buffer]:
    """Execute ``steps`` — (collective name, groups) — on ``initial`` (devices × elements)."""
    devices, length = initial.shape
    if length % chunks:
        raise OracleError(f"{length} elements do not cut into {chunks} chunks")
    buffers = [Buffer(list(range(chunks)), row.reshape(chunks, -1).copy()) for row in initial]
    for number, (collective, groups) in enumerate(steps, start=1):
        touched = [d for g in groups for d in g]
        if len(touched) != len(set(touched)):
            raise OracleError(f"step {number}: groups overlap")
        for group in groups:
            members = [buffers[d] for d in group]
            if collective == "Broadcast":
                root = members[0]
                for d in group:
                    buffers[d] = Buffer(list(root.labels), root.data.copy())
                continue
            sizes = {len(b.labels) for b in members}
            if len(sizes) != 1:
                raise OracleError(f"step {number} {collective}: group {group} has buffers of sizes {sizes}")
            size = sizes.pop()
            if collective == "AllGather":
                labels = [label for b in members for label in b.labels]
                if len(set(labels)) != len(labels):
                    raise OracleError(f"step {number}: AllGather over {group} gathers a chunk twice")
                gathered = np.concatenate([b.data for b in members])
                order = np.argsort(labels, kind="stable")
                for d in group:
                    buffers[d] = Buffer(sorted(labels), gathered[order].copy())
                continue
            total = np.sum([b.data for b in members], axis=0)
            if collective == "AllReduce":
                for d in group:
                    buffers[d] = Buffer(list(buffers[d].labels), total.copy())
            elif collective == "Reduce":
                buffers[group[0]] = Buffer(list(buffers[group[0]].labels), total)
            elif collective == "ReduceScatter":
                if size % len(group):
                    raise OracleError(f"step {number}: {size} chunks do not scatter over {len(group)} devices")
                block = size // len(group)
                for i, d in enumerate(group):
                    buffers[d] = Buffer(buffers[d].labels[i * block:(i + 1) * block],
                                        total[i * block:(i + 1) * block].copy())
            else:
                raise OracleError(f"unknown collective {collective}")
    return buffers


def reduction_partners(rows: list[list[int]], reduce: list[int]) -> list[list[int]]:
    """For every device, the devices it must be summed with: same coordinate on
    every axis not reduced. Device numbering: level indices are the
    mixed-radix digits of the device id; a level index splits into axis digits
    (axis 0 most significant); an axis coordinate joins its digits across
    levels, outer level first."""
    matrix = np.array(rows)
    hierarchy = matrix.prod(axis=0)
    devices = int(hierarchy.prod())
    level_index = np.array(np.unravel_index(np.arange(devices), hierarchy))          # (levels, N)
    digits = np.stack([np.array(np.unravel_index(level_index[j], matrix[:, j]))     # (levels, axes, N)
                       for j in range(len(hierarchy))])
    coordinates = np.stack([np.ravel_multi_index(tuple(digits[:, a, :]), matrix[a, :])
                            for a in range(matrix.shape[0])])                        # (axes, N)
    kept = [a for a in range(matrix.shape[0]) if a not in reduce]
    key = [tuple(coordinates[kept, d]) for d in range(devices)]
    return [[e for e in range(devices) if key[e] == key[d]] for d in range(devices)]


def check_program(steps, rows: list[list[int]], reduce: list[int], rng: np.random.Generator,
                  chunk: int = 2) -> None:
    """Raise :class:`OracleError` unless every device ends with the sum over its
    reduction group of everybody's initial data, and nothing else."""
    partners = reduction_partners(rows, reduce)
    chunks = len(partners[0])
    initial = rng.integers(0, 2**20, size=(len(partners), chunks * chunk), dtype=np.int64)
    final = run(steps, initial, chunks)
    for device, buffer in enumerate(final):
        if buffer.labels != list(range(chunks)):
            raise OracleError(f"device {device} ends with chunks {buffer.labels} instead of the whole tensor")
        expected = initial[partners[device]].sum(axis=0)
        if not np.array_equal(buffer.data.reshape(-1), expected):
            raise OracleError(f"device {device} does not hold the sum over devices {partners[device]}")
