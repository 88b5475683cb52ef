"""What each rank runs for tests/ucc/test_ucc_native_motifs.py (imported by spawned ranks).

Every rank builds the same motif cases (:func:`cases`) and, for each member
set it belongs to, three UCC backends for ``sorted(members)``: one where every
member runs :func:`enforcer.runtime.ucc_motifs.run_collective`, one where every member runs its C++
twin (``enforcer._native.testing.ucc_motif``, the code a C++ plan runtime runs
on a UCC channel), and one where members alternate between the two. Inputs are
seeded by (case, rank); the C++ and the mixed results must equal the Python
ones bit for bit, and the int64 ones the exact result.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from enforcer.comm import ucc

from enforcer.runtime import ucc_motifs
from optimizer_service.plan import Collective, Motif
from tests.enforcer.native_motif_ranks import data, member_sets, record_case

DTYPES = ("float32", "float64", "int64")
SENTINEL = -7


@dataclass(frozen=True)
class Case:
    """One motif on ``p`` members over a flat buffer of ``numel`` elements (all-to-all: (p, numel) blocks)."""

    motif: Motif
    dtype: str
    numel: int

    def __str__(self) -> str:
        return f"{self.motif} {self.dtype} over {self.numel}"


def _parts(sizes: list[int], start: int = 0, gap: int = 0) -> tuple[tuple[int, int], ...]:
    out, at = [], start
    for size in sizes:
        out.append((at, at + size))
        at += size + gap
    return tuple(out)


def cases(p: int) -> list[Case]:
    """Every motif kind: empty, one element, uneven and empty parts, parts with gaps, and > 1 MiB."""
    ranks = tuple(range(p))
    found = []
    for dtype in DTYPES:
        for kind in (Collective.ALL_REDUCE, Collective.REDUCE, Collective.BROADCAST):
            for lo, hi, numel in ((0, 0, 4), (2, 3, 5), (3, 1003, 1010), (0, 300_001, 300_001)):
                found.append(Case(Motif(kind, ranks, ((lo, hi),)), dtype, numel))
        for kind in (Collective.REDUCE_SCATTER, Collective.ALL_GATHER):
            for ranges in (_parts([0] * p), _parts([1] * p, start=2), _parts([3 * j for j in range(p)]),
                           _parts([5 + j for j in range(p)], start=1, gap=2), _parts([100_003] * p)):
                numel = max(b for _, b in ranges) + 3
                found.append(Case(Motif(kind, ranks, ranges), dtype, numel))
        for width, columns, window in ((1, (0, 1), (0, p)), (5, (1, 4), (1, p)), (5, (0, 5), (0, 1)),
                                       (5, (3, 3), (0, p)), (7, (2, 7), (1, max(2, p - 1))), (50_001, (0, 50_001), (0, p))):
            found.append(Case(Motif(Collective.ALL_TO_ALL, ranks, (columns,), window), dtype, width))
    return found


def run_case(index: int, case: Case, native: bool, members: list[int], backend) -> torch.Tensor:
    """One motif on this rank, in C++ (``native``) or Python; every buffer it touched, flat."""
    from enforcer import _native

    rank = dist.get_rank()
    motif = case.motif
    if motif.kind is Collective.ALL_TO_ALL:
        buffer = data(index, rank, (len(members), case.numel), case.dtype)
        output = torch.full((len(members), case.numel), SENTINEL, dtype=buffer.dtype)
    else:
        buffer, output = data(index, rank, (case.numel,), case.dtype), None
    if native:
        _native.testing.ucc_motif(motif.kind.value, buffer, output, list(motif.ranges), motif.window, members, rank,
                                  backend)
    else:
        ucc_motifs.run_collective(motif, buffer, output, members, rank, backend)
    return buffer.view(-1) if output is None else torch.cat([buffer.view(-1), output.view(-1)])


def expected(index: int, case: Case, members: list[int]) -> torch.Tensor | None:
    """This rank's exact buffer after an int64 motif, from every member's seeded input (None: unchecked)."""
    if case.dtype != "int64":
        return None
    rank, motif = dist.get_rank(), case.motif
    i = members.index(rank)
    if motif.kind is Collective.ALL_TO_ALL:
        n, (lo, hi) = len(members), motif.ranges[0]
        blocks = {m: data(index, m, (n, case.numel), case.dtype) for m in members}
        output = torch.full((n, case.numel), SENTINEL, dtype=torch.int64)
        for offset in range(*motif.window):
            src = (i - offset) % n
            output[src, lo:hi] = blocks[members[src]][i, lo:hi]
        return torch.cat([blocks[rank].view(-1), output.view(-1)])
    inputs = {m: data(index, m, (case.numel,), case.dtype) for m in members}
    out = inputs[rank].clone()
    total = sum(inputs.values(), torch.zeros_like(out))
    if motif.kind in (Collective.ALL_REDUCE, Collective.REDUCE, Collective.BROADCAST):
        (lo, hi), = motif.ranges
        if motif.kind is Collective.ALL_REDUCE or (motif.kind is Collective.REDUCE and i == 0):
            out[lo:hi] = total[lo:hi]
        elif motif.kind is Collective.BROADCAST:
            out[lo:hi] = inputs[members[0]][lo:hi]
        else:
            return None                      # a reduce's non-root buffer is scratch
        return out
    if motif.kind is Collective.REDUCE_SCATTER:
        lo, hi = motif.ranges[i]
        return total[lo:hi]                  # compared with this rank's own range only
    for j, m in enumerate(members):          # ALL_GATHER: member j's range from member j
        lo, hi = motif.ranges[j]
        out[lo:hi] = inputs[m][lo:hi]
    return out


def _mine(case: Case, members: list[int], result: torch.Tensor) -> torch.Tensor:
    if case.motif.kind is Collective.REDUCE_SCATTER:
        lo, hi = case.motif.ranges[members.index(dist.get_rank())]
        return result[lo:hi]
    return result


def compare_motifs() -> dict[str, object]:
    """Every case on every member set this rank is in, in Python, in C++ and mixed; see the module doc."""
    rank = dist.get_rank()
    report: dict[str, object] = {"checked": 0, "exact": 0, "mixed": 0, "differences": []}
    made = []
    for members in member_sets(dist.get_world_size()):
        if rank not in members or len(members) < 2:
            continue
        order = sorted(members)
        store = dist.distributed_c10d._get_default_store()
        backends = [ucc.create(dist.PrefixStore(f"ucc-motifs/{name}/{'-'.join(map(str, members))}/", store),
                               order.index(rank), len(order), timedelta(seconds=60)) for name in ("py", "cpp", "mixed")]
        made += backends
        mixed_native = members.index(rank) % 2 == 0       # C++ at even motif positions, Python at odd ones
        for index, case in enumerate(cases(len(members))):
            want = run_case(index, case, False, members, backends[0])
            got = run_case(index, case, True, members, backends[1])
            mixed = run_case(index, case, mixed_native, members, backends[2])
            exact = expected(index, case, members)
            record_case(report, f"members {members} rank {rank}: {case}", "ucc_motifs.py", members, want, got,
                        mixed, exact, None if exact is None else _mine(case, members, want))
    dist.barrier()
    for backend in made:
        backend.shutdown()
    return report
