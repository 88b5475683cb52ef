"""What each rank runs for tests/enforcer/test_native_motifs.py (imported by spawned ranks).

Every rank builds the same list of motif cases (:func:`cases`) and, for each
member set it belongs to, three bare gloo backends: one where every member
runs enforcer/comm/sendrecv.py, one where every member runs the C++ twin
(``enforcer._native.testing``), and one where members alternate between the
two. Inputs are seeded by (case, rank), so all three runs start from the same
numbers; the C++ and the mixed results must equal the Python ones bit for bit.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from enforcer.comm import sendrecv

DTYPES = ("float32", "float64", "int64")
#: > 1 MiB in every dtype: two segments of the default chain, parts of > 100 KiB on 8 ranks.
LARGE = 300_001
SENTINEL = -7


@dataclass(frozen=True)
class Case:
    """One motif call: ``sizes`` are the ring's part sizes; ``numel`` and
    ``segment_bytes`` the chain's buffer; ``width``/``columns``/``window`` the all-to-all's."""

    motif: str
    dtype: str
    sizes: tuple[int, ...] = ()
    numel: int = 0
    segment_bytes: int = sendrecv.CHAIN_SEGMENT_BYTES
    width: int = 0
    columns: tuple[int, int] = (0, 0)
    window: tuple[int, int] = (0, 0)

    def __str__(self) -> str:
        shape = {"reduce_scatter": f"parts {list(self.sizes)[:8]}", "all_gather": f"parts {list(self.sizes)[:8]}",
                 "all_to_all": f"width {self.width} columns {self.columns} window {self.window}"}
        return f"{self.motif} {self.dtype} {shape.get(self.motif, f'{self.numel} elements / {self.segment_bytes} B')}"


def member_sets(world: int) -> list[list[int]]:
    """Every rank in a shuffled order, and a proper subset in a shuffled order (one rank alone on 2)."""
    shuffle = random.Random(world)
    everyone = list(range(world))
    shuffle.shuffle(everyone)
    subset = shuffle.sample(range(world), world - 1 if world <= 4 else world // 2 + 1)
    return [everyone, subset]


def cases(p: int) -> list[Case]:
    """Every motif on ``p`` members: empty, one element, uneven and empty parts, many and > 1 MiB segments."""
    def spread(n: int) -> tuple[int, ...]:           # as even as it gets; the first n % p parts one larger
        return tuple(n // p + (j < n % p) for j in range(p))

    found = []
    for dtype in DTYPES:
        for sizes in (spread(0), spread(1), spread(7 * p + 3), tuple(3 * j for j in range(p)), spread(LARGE)):
            found += [Case("reduce_scatter", dtype, sizes=sizes), Case("all_gather", dtype, sizes=sizes)]
        for numel, segment in ((0, sendrecv.CHAIN_SEGMENT_BYTES), (1, sendrecv.CHAIN_SEGMENT_BYTES), (37, 1), (1000, 64),
                               (LARGE, sendrecv.CHAIN_SEGMENT_BYTES)):
            found += [Case(motif, dtype, numel=numel, segment_bytes=segment) for motif in ("reduce", "broadcast")]
        for width, columns, window in ((0, (0, 0), (0, p)), (1, (0, 1), (0, p)), (5, (1, 4), (1, p)),
                                       (5, (0, 5), (0, 1)), (5, (3, 3), (0, p)), (7, (2, 7), (1, max(2, p - 1))),
                                       (LARGE // p, (0, LARGE // p), (0, p))):
            found.append(Case("all_to_all", dtype, width=width, columns=columns, window=window))
    return found


def data(case_index: int, rank: int, shape: tuple[int, ...], dtype: str) -> torch.Tensor:
    """This rank's input of a case: random normals (so sum order shows in the bits) or integers."""
    gen = torch.Generator().manual_seed(case_index * 1000 + rank)
    if dtype == "int64":
        return torch.randint(-1000, 1000, shape, generator=gen)
    return torch.randn(shape, generator=gen, dtype=getattr(torch, dtype))


def run_case(index: int, case: Case, native: bool, members: list[int], backend: dist.Backend) -> torch.Tensor:
    """One motif call on this rank, in C++ (``native``) or Python; returns every buffer it touched, flat."""
    from enforcer import _native

    rank = dist.get_rank()
    cpp = _native.testing
    peers = sendrecv.BackendPeers(backend, members, rank)
    if case.motif in ("reduce_scatter", "all_gather"):
        flat = data(index, rank, (sum(case.sizes),), case.dtype)
        parts = list(flat.split(list(case.sizes)))
        if native:
            getattr(cpp, case.motif)(parts, members, backend, rank)
        else:
            getattr(sendrecv, case.motif)(parts, members, peers)
        return flat
    if case.motif in ("reduce", "broadcast"):
        buffer = data(index, rank, (case.numel,), case.dtype)
        if native:
            getattr(cpp, case.motif)(buffer, members, backend, rank, case.segment_bytes)
        else:
            getattr(sendrecv, case.motif)(buffer, members, peers, segment_bytes=case.segment_bytes)
        return buffer
    inputs = data(index, rank, (len(members), case.width), case.dtype)
    outputs = torch.full((len(members), case.width), SENTINEL, dtype=inputs.dtype)
    if native:
        cpp.all_to_all(inputs, outputs, case.columns, case.window, members, backend, rank)
    else:
        sendrecv.all_to_all(inputs, outputs, case.columns, case.window, members, peers)
    return torch.cat([inputs.view(-1), outputs.view(-1)])


def expected(index: int, case: Case, members: list[int]) -> torch.Tensor | None:
    """The exact result of this rank's own block (int64 cases), from every member's seeded input; None: unchecked."""
    rank = dist.get_rank()
    i = members.index(rank)
    if case.dtype != "int64" or case.motif == "all_to_all":
        return None
    if case.motif in ("reduce_scatter", "all_gather"):
        start = sum(case.sizes[:i])
        blocks = [data(index, m, (sum(case.sizes),), case.dtype)[start:start + case.sizes[i]] for m in members]
        return sum(blocks[1:], blocks[0].clone()) if case.motif == "reduce_scatter" else blocks[i]
    inputs = [data(index, m, (case.numel,), case.dtype) for m in members]
    if case.motif == "reduce":
        return sum(inputs[1:], inputs[0].clone()) if i == 0 else None
    return inputs[0]


def own_block(case: Case, members: list[int], result: torch.Tensor) -> torch.Tensor:
    i = members.index(dist.get_rank())
    if case.motif in ("reduce_scatter", "all_gather"):
        start = sum(case.sizes[:i])
        return result[start:start + case.sizes[i]]
    return result


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def record_case(report: dict, where: str, twin: str, members: list[int], want: torch.Tensor, got: torch.Tensor,
                mixed: torch.Tensor, exact: torch.Tensor | None, own: torch.Tensor | None) -> None:
    """Count one case in ``report`` and name what differs: the C++ result (``got``) or the mixed
    C++/Python one from the Python ``twin``'s (``want``), bit for bit, or this rank's part of the
    Python result (``own``) from the ``exact`` one (None: unchecked)."""
    if not same_bits(got, want):
        report["differences"].append(f"{where}: C++ differs from {twin}")
    if not same_bits(mixed, want):
        report["differences"].append(f"{where}: mixed C++/Python differs from {twin}")
    if exact is not None:
        if not torch.equal(own, exact):
            report["differences"].append(f"{where}: {twin}'s result is not the exact one")
        report["exact"] += 1
    report["checked"] += 1
    report["mixed"] += len(members) > 1


def bare_backend(members: list[int], name: str) -> dist.Backend:
    """A fresh gloo backend for exactly ``members`` (this rank at its position), on its own store prefix."""
    store = dist.PrefixStore(f"native-motifs/{name}/{'-'.join(map(str, members))}/",
                             dist.distributed_c10d._get_default_store())
    return dist.ProcessGroupGloo(store, members.index(dist.get_rank()), len(members), timedelta(seconds=60))


def compare_motifs() -> dict[str, object]:
    """Run every case on every member set this rank is in, in Python, in C++ and mixed.

    Returns ``{"checked": n, "mixed": n, "exact": n, "differences": [...]}``:
    ``differences`` names each case whose C++ or mixed result is not Python's,
    bit for bit, or whose Python result is not the exact one.
    """
    rank = dist.get_rank()
    report: dict[str, object] = {"checked": 0, "mixed": 0, "exact": 0, "differences": []}
    made: list[dist.Backend] = []
    for members in member_sets(dist.get_world_size()):
        if rank not in members:
            continue
        python_backend, native_backend, mixed_backend = (bare_backend(members, n) for n in ("py", "cpp", "mixed"))
        mixed_native = members.index(rank) % 2 == 0       # C++ at even positions, Python at odd ones
        for index, case in enumerate(cases(len(members))):
            want = run_case(index, case, False, members, python_backend)
            got = run_case(index, case, True, members, native_backend)
            mixed = run_case(index, case, mixed_native, members, mixed_backend)
            exact = expected(index, case, members)
            record_case(report, f"members {members} rank {rank}: {case}", "sendrecv.py", members, want, got, mixed,
                        exact, None if exact is None else own_block(case, members, want))
        made += [python_backend, native_backend, mixed_backend]
    dist.barrier()              # nobody closes a backend while a peer still reads from it
    for backend in made:
        backend.shutdown()
    return report
