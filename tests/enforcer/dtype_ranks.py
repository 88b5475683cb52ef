"""Ranks of the every-dtype tests (:mod:`tests.enforcer.test_dtypes`; imported by spawned ranks).

A world of four ranks, two "nodes" of two (``NODES``). One plan names every case: each planned
op kind in every dtype a trace or plan names, the reducing kinds once per reduce op, keyed with
the op's dtype and decomposed so that motif ranges cut the buffer in several places, at sizes that
do not divide (1001 elements over 4 members, blocks of 37, 9 and 5), over two channels — a
segmented ring all-reduce whose motifs alternate between the channels, a two-level all-reduce
(reduce-scatter in each node on channel 0, all-reduce across the nodes on channel 1, all-gather in
each node), a tree of reduces and broadcasts over the nodes, segmented reduce-scatters and
all-gathers, a splined broadcast and a segmented, splined all-to-all. The program runs every
case once on the ``p2enforcer`` world under that plan and once on a plain gloo group, and
reports per case what each gave and whether the plan ran it (:func:`every_case`).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, replace
from itertools import count

import torch
import torch.distributed as dist

import enforcer
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.dtypes import DTYPE_BYTES
from optimizer_service.plan.motif import Motif, Par, Seq, comm_op, rewrite
from optimizer_service.plan.op_plan import OpKey, OpPlan
from optimizer_service.plan.plan import Plan
from optimizer_service.syndicate.transforms import (
    segment,
    spline_all_to_all,
    spline_broadcast,
    spline_ring,
    spline_tree,
)
from tests.ucc.plan_ucc_ranks import channel_backends, ucc_collectives

WORLD = 4
NODES = ((0, 1), (2, 3))
DTYPES = ("float32", "bfloat16", "float16", "float64", "int8", "uint8", "int16", "int32", "int64", "bool")
REDUCE_OPS = ("SUM", "AVG", "MIN", "MAX", "PRODUCT", "PREMUL_SUM")
PREMUL_FACTOR = 0.3
N_AR, N_RS, N_AG, N_BC, N_A2A = 1001, 9, 37, 517, 5      # all_reduce, per member, per member, broadcast, per block
BROADCAST_ROOT = 1


@dataclass(frozen=True)
class Case:
    """One op of the iteration: its kind (a plan kind), dtype, reduce op ("" without one) and decomposition."""

    seq: int
    kind: str
    dtype: str
    reduce_op: str
    shape: str

    def __str__(self) -> str:
        op = f" {self.reduce_op}" if self.reduce_op else ""
        return f"{self.kind}{op} {self.dtype} ({self.shape})"


def cases() -> list[Case]:
    """Every case, in the order the program issues them (their plan ``seq``)."""
    kinds = []
    for dtype in DTYPES:
        kinds += [("all_reduce", dtype, "SUM", "ring"), ("all_reduce", dtype, "SUM", "nodes"),
                  ("all_reduce", dtype, "AVG", "tree")]
        kinds += [("all_reduce", dtype, op, "ring") for op in REDUCE_OPS[2:]]
        kinds += [("reduce_scatter", dtype, op, "segments") for op in REDUCE_OPS]
        kinds += [("all_gather", dtype, "", "segments"), ("broadcast", dtype, "", "halves"),
                  ("all_to_all", dtype, "", "windows")]
    return [Case(seq, *kind) for seq, kind in enumerate(kinds)]


# ---------------------------------------------------------------------------------------------- the plan
def _alternating(plan, first: int = 0):
    turn = count(first)
    return rewrite(plan, lambda m: replace(m, channel=next(turn) % 2))


def _two_level(n: int, size: int):
    """ReduceScatter in each node (channel 0) -> AllReduce across the nodes (channel 1) -> AllGather in each node."""
    half = ((0, n // 2), (n // 2, n))
    local = [Motif(Collective.REDUCE_SCATTER, node, half, element_bytes=size) for node in NODES]
    across = [Motif(Collective.ALL_REDUCE, pair, (half[k],), channel=1, element_bytes=size)
              for k, pair in enumerate(zip(*NODES))]
    gather = [Motif(Collective.ALL_GATHER, node, half, element_bytes=size) for node in NODES]
    return Seq((Par(tuple(local)), Par(tuple(across)), Par(tuple(gather))))


def decomposition(case: Case):
    size, p = DTYPE_BYTES[case.dtype], WORLD
    if case.kind == "all_reduce":
        whole = comm_op(Collective.ALL_REDUCE, range(p), N_AR, size)
        if case.shape == "nodes":
            return _two_level(N_AR, size)
        if case.shape == "tree":
            return _alternating(spline_tree(whole, 2))
        return _alternating(rewrite(segment(whole, 300), spline_ring))
    if case.kind == "reduce_scatter":
        return _alternating(segment(comm_op(Collective.REDUCE_SCATTER, range(p), N_RS * p, size), 4))
    if case.kind == "all_gather":
        return _alternating(segment(comm_op(Collective.ALL_GATHER, range(p), N_AG * p, size), 10), 1)
    if case.kind == "broadcast":
        order = (BROADCAST_ROOT, *[r for r in range(p) if r != BROADCAST_ROOT])
        return _alternating(spline_broadcast(Motif(Collective.BROADCAST, order, ((0, N_BC),), element_bytes=size)))
    whole = comm_op(Collective.ALL_TO_ALL, range(p), N_A2A, size)
    return _alternating(rewrite(segment(whole, 2), lambda m: spline_all_to_all(m, 2)))


def buffer_bytes(case: Case) -> int:
    elements = {"all_reduce": N_AR, "reduce_scatter": N_RS * WORLD, "all_gather": N_AG * WORLD,
                "broadcast": N_BC, "all_to_all": N_A2A * WORLD}[case.kind]
    return elements * DTYPE_BYTES[case.dtype]


def build_plan() -> Plan:
    ops, base = [], 0
    group = tuple(range(WORLD))
    for case in cases():
        root = BROADCAST_ROOT if case.kind == "broadcast" else 0
        op = OpPlan.of(OpKey(case.seq, case.kind, buffer_bytes(case), group, root, case.dtype), decomposition(case),
                       base=base)
        base = max(op.order) + 1
        ops.append(op)
    return Plan(version=1, world_size=WORLD, channels={0: None, 1: None}, ops=tuple(ops))


# ------------------------------------------------------------------------------------------- the program
def values(rank: int, numel: int, dtype_name: str, salt: int) -> torch.Tensor:
    """Rank ``rank``'s input: floats with fractions (so sums round), integers over a range whose sums
    wrap for 8-bit types and stay exact otherwise, random bools."""
    gen = torch.Generator().manual_seed(7919 * rank + 104729 * salt + numel)
    dtype = getattr(torch, dtype_name)
    if dtype.is_floating_point:
        return torch.randn(numel, generator=gen, dtype=torch.float64).to(dtype)
    low, high = {"int8": (-128, 128), "uint8": (0, 256), "int16": (-1000, 1000), "int32": (-2 ** 20, 2 ** 20),
                 "int64": (-2 ** 40, 2 ** 40), "bool": (0, 2)}[dtype_name]
    return torch.randint(low, high, (numel,), generator=gen).to(dtype)


def _reduce_op(name: str):
    if name == "PREMUL_SUM":
        return dist._make_nccl_premul_sum(PREMUL_FACTOR)
    return getattr(dist.ReduceOp, name)


def portable(tensor: torch.Tensor) -> tuple[str, bytes]:
    """``tensor`` as its dtype name and bytes: what a rank sends back (tensors themselves would travel
    as shared memory that the parent can no longer open once the rank has exited)."""
    return str(tensor.dtype).removeprefix("torch."), tensor.contiguous().view(torch.uint8).numpy().tobytes()


def tensor_of(sent: tuple[str, bytes]) -> torch.Tensor:
    """The tensor :func:`portable` sent."""
    dtype, data = sent
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(getattr(torch, dtype))


def _outcome(run) -> dict:
    """``run()``'s result (:func:`portable`), or the first line of what it raised."""
    try:
        return {"tensor": portable(run())}
    except Exception as error:  # noqa: BLE001 — an op gloo refuses: the enforcer must refuse it too
        return {"error": str(error).splitlines()[0] if str(error) else type(error).__name__}


def run_case(case: Case, group, premul_as_scaled_sum: bool) -> dict:
    """``case`` on ``group`` (None: the default, p2enforcer group). With ``premul_as_scaled_sum``
    PREMUL_SUM runs as SUM times the factor (what the C++ backend does on gloo, which lacks it)."""
    rank, p, dtype, salt = dist.get_rank(), WORLD, getattr(torch, case.dtype), case.seq
    op_name = "SUM" if case.reduce_op == "PREMUL_SUM" and premul_as_scaled_sum else case.reduce_op

    def scaled(tensor: torch.Tensor) -> torch.Tensor:
        if op_name == case.reduce_op:
            return tensor
        # The C++ backend's PREMUL_SUM on gloo: the SUM times the factor in the tensor's dtype (as
        # NCCL's premul_sum takes it); integers it refuses.
        if not tensor.is_floating_point():
            raise TypeError("PREMUL_SUM needs floating-point tensors")
        return tensor.mul_(torch.tensor(PREMUL_FACTOR, dtype=tensor.dtype))

    if case.kind == "all_reduce":
        def run():
            tensor = values(rank, N_AR, case.dtype, salt)
            dist.all_reduce(tensor, op=_reduce_op(op_name), group=group)
            return scaled(tensor)
    elif case.kind == "reduce_scatter":
        def run():
            output = torch.empty(N_RS, dtype=dtype)
            dist.reduce_scatter_tensor(output, values(rank, N_RS * p, case.dtype, salt), op=_reduce_op(op_name),
                                       group=group)
            return scaled(output)
    elif case.kind == "all_gather":
        def run():
            output = torch.empty(N_AG * p, dtype=dtype)
            dist.all_gather_into_tensor(output, values(rank, N_AG, case.dtype, salt), group=group)
            return output
    elif case.kind == "broadcast":
        def run():
            tensor = values(rank, N_BC, case.dtype, salt)
            dist.broadcast(tensor, src=BROADCAST_ROOT, group=group)
            return tensor
    else:
        def run():
            output = torch.empty(N_A2A * p, dtype=dtype)
            dist.all_to_all_single(output, values(rank, N_A2A * p, case.dtype, salt), group=group)
            return output
    return _outcome(run)


def magnitude(case: Case) -> torch.Tensor:
    """Per result element, the sum over the members of the operands' magnitudes (float64)."""
    rank, p = dist.get_rank(), WORLD
    if case.kind == "all_reduce":
        return sum(values(r, N_AR, case.dtype, case.seq).double().abs() for r in range(p))
    inputs = [values(r, N_RS * p, case.dtype, case.seq).double().abs() for r in range(p)]
    return sum(inputs)[rank * N_RS:(rank + 1) * N_RS]


def every_case() -> dict:
    """Every case under the plan and on plain gloo: per case the two outcomes (tensor or error),
    whether the plan ran it, and for floating sums the operands' magnitudes (for the bound)."""
    plain = dist.new_group(backend="gloo")
    cpp = enforcer.implementation() == "cpp"
    enforcer.install_plan(build_plan().to_json())
    backends = channel_backends()
    before = len(enforcer.trace()["ops"])
    results = []
    for case in cases():
        got = run_case(case, None, premul_as_scaled_sum=False)
        want = run_case(case, plain, premul_as_scaled_sum=cpp)
        result = {"case": case, "got": got, "want": want}
        if case.reduce_op in ("SUM", "AVG") and getattr(torch, case.dtype).is_floating_point:
            result["magnitude"] = portable(magnitude(case))
        results.append(result)
    enforcer.step()
    ops = enforcer.trace()["ops"][before:]
    collectives = ucc_collectives()
    enforcer.remove_plan()
    assert len(ops) == len(results), f"{len(ops)} ops traced for {len(results)} cases"
    for result, op in zip(results, ops):
        result["enforced"] = op["enforced"]
    return {"impl": enforcer.implementation(), "results": results, "backends": backends,
            "ucc_collectives": collectives, "mismatch": dtype_mismatch(plain)}


# ---------------------------------------------------------------------------------------- dtype mismatch
MISMATCH_ELEMENTS = 1001


def _mismatch_plan() -> Plan:
    """Op 0 keyed bfloat16, op 1 keyed with no dtype: both all-reduces of 2-byte elements."""
    group, nbytes = tuple(range(WORLD)), MISMATCH_ELEMENTS * 2
    ops, base = [], 0
    for seq, dtype in enumerate(("bfloat16", "")):
        ring = rewrite(segment(comm_op(Collective.ALL_REDUCE, range(WORLD), MISMATCH_ELEMENTS, 2), 300), spline_ring)
        op = OpPlan.of(OpKey(seq, "all_reduce", nbytes, group, 0, dtype), _alternating(ring), base=base)
        base = max(op.order) + 1
        ops.append(op)
    return Plan(version=2, world_size=WORLD, channels={0: None, 1: None}, ops=tuple(ops))


class _Stderr:
    """What this process writes to its stderr (file descriptor 2, where both runtimes log) meanwhile."""

    def __enter__(self) -> _Stderr:
        import sys
        sys.stderr.flush()
        self._file = tempfile.TemporaryFile()
        self._saved = os.dup(2)
        os.dup2(self._file.fileno(), 2)
        return self

    def __exit__(self, *exc) -> None:
        import sys
        sys.stderr.flush()
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._file.seek(0)
        self.text = self._file.read().decode(errors="replace")
        self._file.close()


def dtype_mismatch(plain) -> dict:
    """Two iterations of two float16 all-reduces under :func:`_mismatch_plan`: op 0's key names
    bfloat16 (same bytes), so it passes through (and equals plain gloo's bits); op 1's names none,
    so the plan runs it. Returns what was enforced, op 0's equality and the mismatch lines logged."""
    rank = dist.get_rank()
    enforcer.install_plan(_mismatch_plan().to_json())
    before = len(enforcer.trace()["ops"])
    equal = []          # op 0, passed through: gloo's bits
    with _Stderr() as log:
        for _ in range(2):
            for seq in range(2):
                got = values(rank, MISMATCH_ELEMENTS, "float16", 1000 + seq)
                want = got.clone()
                dist.all_reduce(got)
                if seq == 0:
                    dist.all_reduce(want, group=plain)
                    equal.append(torch.equal(got.view(torch.int16), want.view(torch.int16)))
            enforcer.step()
    ops = enforcer.trace()["ops"][before:]
    enforcer.remove_plan()
    return {"enforced": [op["enforced"] for op in ops], "equal": equal,
            "logged": [line for line in log.text.splitlines() if "passing the op through" in line]}
