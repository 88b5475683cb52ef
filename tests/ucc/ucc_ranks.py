"""Rank-side bodies of the UCC tests (imported by spawned ranks).

:func:`compare_every_op` makes a gloo backend and a UCC backend on the same
ranks (from the world's store) and runs every op of the UCC backend on both
with the same inputs, comparing the results element for element. Inputs are
small integers (:func:`tests.enforcer.ops.data`), so every partial sum,
product, min and max is exact in float32/float64 and the two must agree bit
for bit whatever order either library reduces in; one extra case compares
random floats with a tolerance (the reduction orders differ with more than two
ranks). AVG and PREMUL_SUM, which gloo lacks, are compared with gloo's SUM
divided / of the scaled inputs. The v-variants the plan motifs use
(allgatherv, reduce_scatterv, alltoallv) are compared with what every rank can
compute itself, since each rank can regenerate any other rank's inputs.
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import AllgatherOptions

from enforcer.comm import ucc
from tests.enforcer.ops import data

TIMEOUT = timedelta(seconds=60)
INT_ONLY = ("BAND", "BOR", "BXOR")
REDUCE_OPS = ("SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR")


def store(prefix: str) -> dist.Store:
    return dist.PrefixStore(prefix, dist.distributed_c10d._get_default_store())


def backends(tag: str):
    """A gloo and a UCC backend of the whole world (each rank calls it alike)."""
    rank, size = dist.get_rank(), dist.get_world_size()
    gloo = dist.ProcessGroupGloo(store(f"{tag}/gloo/"), rank, size, TIMEOUT)
    return gloo, ucc.create(store(f"{tag}/ucc/"), rank, size, TIMEOUT)


def _allreduce_opts(op) -> dist.AllreduceOptions:
    opts = dist.AllreduceOptions()
    opts.reduceOp = op
    return opts


def _reduce_opts(op, root: int) -> dist.ReduceOptions:
    opts = dist.ReduceOptions()
    opts.reduceOp = op
    opts.rootRank = root
    return opts


def _rs_opts(op) -> dist.ReduceScatterOptions:
    opts = dist.ReduceScatterOptions()
    opts.reduceOp = op
    return opts


def _root_opts(kind, root: int):
    opts = kind()
    opts.rootRank = root
    return opts


def uneven_splits(me: int, size: int, numel: int) -> tuple[list[int], list[int]]:
    """Split sizes of an uneven all_to_all_single: what ``me`` sends to and receives from each member
    (some empty); consistent across members (member a sends b what b expects from a)."""
    def count(src: int, dst: int) -> int:
        return (src + 2 * dst) % 3 + (numel % 2)
    return [count(me, k) for k in range(size)], [count(k, me) for k in range(size)]


def op_cases(rank: int, size: int, numel: int, dtype: torch.dtype):
    """(name, run(backend) -> result) for every op on this size and dtype; run makes fresh inputs."""
    last = size - 1
    integer = not dtype.is_floating_point
    cases = []
    for op_name in REDUCE_OPS:
        if op_name in INT_ONLY and not integer:
            continue
        op = getattr(dist.ReduceOp, op_name)

        def allreduce(b, op=op):
            t = data(rank, numel, dtype)
            b.allreduce([t], _allreduce_opts(op)).wait()
            return t
        cases.append((f"allreduce/{op_name}", allreduce))

    def broadcast(b):
        t = data(rank, numel, dtype, 1)
        b.broadcast([t], _root_opts(dist.BroadcastOptions, last)).wait()
        return t

    def reduce(b):
        t = data(rank, numel, dtype, 2)
        b.reduce([t], _reduce_opts(dist.ReduceOp.SUM, last)).wait()
        return t if rank == last else None

    def reduce_max(b):
        t = data(rank, numel, dtype, 2)
        b.reduce([t], _reduce_opts(dist.ReduceOp.MAX, 0)).wait()
        return t if rank == 0 else None

    def allgather(b):
        out = [torch.empty(numel, dtype=dtype) for _ in range(size)]
        b.allgather([out], [data(rank, numel, dtype, 3)], AllgatherOptions()).wait()
        return out

    def allgather_base(b):
        out = torch.empty(numel * size, dtype=dtype)
        b._allgather_base(out, data(rank, numel, dtype, 4), AllgatherOptions()).wait()
        return out

    def reduce_scatter(b):
        out = torch.empty(numel, dtype=dtype)
        b.reduce_scatter([out], [[data(rank, numel, dtype, 5 + j) for j in range(size)]],
                         _rs_opts(dist.ReduceOp.SUM)).wait()
        return out

    def reduce_scatter_base(b):
        out = torch.empty(numel, dtype=dtype)
        b._reduce_scatter_base(out, data(rank, numel * size, dtype, 6), _rs_opts(dist.ReduceOp.SUM)).wait()
        return out

    def reduce_scatter_base_max(b):
        out = torch.empty(numel, dtype=dtype)
        b._reduce_scatter_base(out, data(rank, numel * size, dtype, 6), _rs_opts(dist.ReduceOp.MAX)).wait()
        return out

    def alltoall_equal(b):
        out = torch.empty(numel * size, dtype=dtype)
        b.alltoall_base(out, data(rank, numel * size, dtype, 8), [], [], dist.AllToAllOptions()).wait()
        return out

    def alltoall_uneven(b):
        send, receive = uneven_splits(rank, size, numel)
        out = torch.empty(sum(receive), dtype=dtype)
        b.alltoall_base(out, data(rank, sum(send), dtype, 9), receive, send, dist.AllToAllOptions()).wait()
        return out

    def alltoall_rows(b):            # 2-D, split sizes count rows
        send, receive = uneven_splits(rank, size, numel)
        out = torch.empty(sum(receive), 3, dtype=dtype)
        b.alltoall_base(out, data(rank, sum(send) * 3, dtype, 10).view(-1, 3), receive, send,
                        dist.AllToAllOptions()).wait()
        return out

    def alltoall_list(b):            # gloo wants equal sizes here (alltoall_base covers uneven ones)
        out = [torch.empty(numel, dtype=dtype) for _ in range(size)]
        b.alltoall(out, [data(rank, numel, dtype, 11 + k) for k in range(size)], dist.AllToAllOptions()).wait()
        return out

    def gather(b):
        out = [[torch.empty(numel, dtype=dtype) for _ in range(size)]] if rank == last else []
        b.gather(out, [data(rank, numel, dtype, 12)], _root_opts(dist.GatherOptions, last)).wait()
        return out

    def scatter(b):
        inputs = [[data(rank, numel, dtype, 13 + j) for j in range(size)]] if rank == last else []
        out = torch.empty(numel, dtype=dtype)
        b.scatter([out], inputs, _root_opts(dist.ScatterOptions, last)).wait()
        return out

    def strided_allreduce(b):        # a non-contiguous tensor: reduced into a copy, copied back
        t = data(rank, numel * 2, dtype, 14).view(2, numel).t()
        b.allreduce([t], _allreduce_opts(dist.ReduceOp.SUM)).wait()
        return t

    cases += [("broadcast", broadcast), ("reduce/SUM", reduce), ("reduce/MAX", reduce_max),
              ("allgather", allgather), ("_allgather_base", allgather_base), ("reduce_scatter", reduce_scatter),
              ("_reduce_scatter_base", reduce_scatter_base), ("_reduce_scatter_base/MAX", reduce_scatter_base_max),
              ("alltoall_base/equal", alltoall_equal), ("alltoall_base/uneven", alltoall_uneven),
              ("alltoall_base/rows", alltoall_rows), ("alltoall", alltoall_list), ("gather", gather),
              ("scatter", scatter), ("allreduce/strided", strided_allreduce)]
    return cases


def _same(a, b) -> bool:
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if a is None or b is None:
        return a is b
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def _derived_cases(rank: int, size: int, numel: int, dtype: torch.dtype):
    """(name, run on ucc, reference run on gloo) for the ops gloo lacks."""
    def ucc_avg(b):
        t = data(rank, numel, dtype)
        b.allreduce([t], _allreduce_opts(dist.ReduceOp.AVG)).wait()
        return t

    def gloo_avg(b):
        t = data(rank, numel, dtype)
        b.allreduce([t], _allreduce_opts(dist.ReduceOp.SUM)).wait()
        return t.div(size, rounding_mode=None if dtype.is_floating_point else "trunc")

    def ucc_premul(b):
        t = data(rank, numel, dtype)
        b.allreduce([t], _allreduce_opts(dist._make_nccl_premul_sum(0.5))).wait()
        return t

    def gloo_premul(b):
        t = data(rank, numel, dtype) * 0.5
        b.allreduce([t], _allreduce_opts(dist.ReduceOp.SUM)).wait()
        return t

    def ucc_rs_avg(b):
        out = torch.empty(numel, dtype=dtype)
        b._reduce_scatter_base(out, data(rank, numel * size, dtype, 6), _rs_opts(dist.ReduceOp.AVG)).wait()
        return out

    def gloo_rs_avg(b):
        out = torch.empty(numel, dtype=dtype)
        b._reduce_scatter_base(out, data(rank, numel * size, dtype, 6), _rs_opts(dist.ReduceOp.SUM)).wait()
        return out.div(size, rounding_mode=None if dtype.is_floating_point else "trunc")

    cases = [("allreduce/AVG", ucc_avg, gloo_avg), ("_reduce_scatter_base/AVG", ucc_rs_avg, gloo_rs_avg)]
    if dtype.is_floating_point:
        cases.append(("allreduce/PREMUL_SUM", ucc_premul, gloo_premul))
    return cases


def compare_every_op(sizes, dtypes) -> dict:
    """Every op on gloo and on UCC, same inputs; {"checked": n, "mismatches": [...]}."""
    rank, size = dist.get_rank(), dist.get_world_size()
    gloo, uccb = backends("every-op")
    checked, mismatches = 0, []
    for dtype_name in dtypes:
        dtype = getattr(torch, dtype_name)
        for numel in sizes:
            for name, run in op_cases(rank, size, numel, dtype):
                want, got = run(gloo), run(uccb)
                checked += 1
                if not _same(want, got):
                    mismatches.append(f"rank {rank} {dtype_name}/{numel}/{name}: gloo {want} ucc {got}")
            for name, run_ucc, run_gloo in _derived_cases(rank, size, numel, dtype):
                want, got = run_gloo(gloo), run_ucc(uccb)
                checked += 1
                if not _same(want, got):
                    mismatches.append(f"rank {rank} {dtype_name}/{numel}/{name}: expected {want} ucc {got}")
    for dtype in (torch.float32, torch.float64):      # random floats: reduction order differs, tolerance
        gen = torch.Generator().manual_seed(rank)
        a = torch.randn(4099, generator=gen, dtype=dtype)
        b = a.clone()
        gloo.allreduce([a], _allreduce_opts(dist.ReduceOp.SUM)).wait()
        uccb.allreduce([b], _allreduce_opts(dist.ReduceOp.SUM)).wait()
        checked += 1
        if not torch.allclose(a, b, rtol=1e-5 if dtype == torch.float32 else 1e-12, atol=1e-5):
            mismatches.append(f"rank {rank} random {dtype}: max difference {(a - b).abs().max().item()}")
    uccb.barrier(dist.BarrierOptions()).wait()
    uccb.shutdown()
    return {"checked": checked, "mismatches": mismatches}


def compare_v_variants(dtype_name: str) -> list[str]:
    """allgatherv_in_place, reduce_scatterv and alltoallv (the motif building blocks) with uneven and
    empty parts, against what each rank computes from every rank's inputs."""
    rank, size = dist.get_rank(), dist.get_world_size()
    dtype = getattr(torch, dtype_name)
    backend = ucc.create(store("v-variants/"), rank, size, TIMEOUT)
    wrong = []
    counts = [(3 * j + 1) % 4 for j in range(size)]          # uneven, some empty
    at = [sum(counts[:j]) + j for j in range(size)]           # with a gap of one element after each part
    length = at[-1] + counts[-1] + 1

    def part(r):
        return data(r, counts[r], dtype, 30)
    buffer = torch.full((length,), -7, dtype=dtype)
    buffer[at[rank]:at[rank] + counts[rank]] = part(rank)
    backend.allgatherv_in_place(buffer, counts, at).wait()
    expected = torch.full((length,), -7, dtype=dtype)
    for r in range(size):
        expected[at[r]:at[r] + counts[r]] = part(r)
    if not torch.equal(buffer, expected):
        wrong.append(f"rank {rank} allgatherv: {buffer.tolist()} != {expected.tolist()}")

    total = sum(counts)
    out = torch.empty(counts[rank], dtype=dtype)
    backend.reduce_scatterv(data(rank, total, dtype, 31), out, counts, dist.ReduceOp.SUM).wait()
    mine = slice(sum(counts[:rank]), sum(counts[:rank + 1]))
    expected = sum(data(r, total, dtype, 31) for r in range(size))[mine]
    if not torch.equal(out, expected):
        wrong.append(f"rank {rank} reduce_scatterv: {out.tolist()} != {expected.tolist()}")

    # alltoallv with displacements into a padded layout: 2 elements to every member, at stride 5.
    source = data(rank, 5 * size, dtype, 32)
    target = torch.full((5 * size,), -7, dtype=dtype)
    two = [2] * size
    backend.alltoallv(source, target, two, [5 * j + 1 for j in range(size)], two,
                      [5 * j + 3 for j in range(size)]).wait()
    expected = torch.full((5 * size,), -7, dtype=dtype)
    for j in range(size):
        expected[5 * j + 3:5 * j + 5] = data(j, 5 * size, dtype, 32)[5 * rank + 1:5 * rank + 3]
    if not torch.equal(target, expected):
        wrong.append(f"rank {rank} alltoallv: {target.tolist()} != {expected.tolist()}")
    backend.shutdown()
    return wrong


def refusals() -> dict[str, str]:
    """The one-line errors of what UCC cannot do (each must fail alike on every rank, before anything is posted)."""
    rank, size = dist.get_rank(), dist.get_world_size()
    backend = ucc.create(store("refusals/"), rank, size, TIMEOUT)
    found = {}

    def attempt(name, fn):
        try:
            fn()
            found[name] = "no error"
        except Exception as error:  # noqa: BLE001 — the message is what is checked
            found[name] = f"{type(error).__name__}: {error}"
    attempt("send", lambda: backend.send([torch.ones(2)], (rank + 1) % size, 0))
    attempt("recv", lambda: backend.recv([torch.ones(2)], (rank + 1) % size, 0))
    attempt("band_float", lambda: backend.allreduce([torch.ones(2)], _allreduce_opts(dist.ReduceOp.BAND)))
    attempt("float16_sum", lambda: backend.allreduce([torch.ones(2, dtype=torch.float16)]))
    attempt("premul_int", lambda: backend.allreduce([torch.ones(2, dtype=torch.int64)],
                                                    _allreduce_opts(dist._make_nccl_premul_sum(2.0))))
    attempt("two_tensors", lambda: backend.allreduce([torch.ones(2), torch.ones(2)]))
    attempt("bad_splits", lambda: backend.alltoall_base(torch.empty(4), torch.empty(4), [1] * size,
                                                        [5] * size, dist.AllToAllOptions()))
    # Nothing above reached UCC: the backend still works.
    t = torch.ones(3)
    backend.allreduce([t]).wait()
    found["still_works"] = str(t.tolist())
    found["name"] = backend.name()
    backend.shutdown()
    return found
