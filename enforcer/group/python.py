"""The ``p2enforcer`` process group: every c10d op, traced, passed through or run by a plan.

``dist.init_process_group(backend="p2enforcer")`` (and ``new_group`` with it)
creates an :class:`EnforcerGroup`: a Python subclass of torch's
``ProcessGroup``. Design, and why (torch 2.13):

* A Python class cannot subclass c10d's ``Backend`` (it has no Python
  constructor), but ``ProcessGroup`` has a trampoline: the methods the Python
  API calls (``group.allreduce``, ``group.all_gather_single``, …) are ours, and
  C++ callers of the trampolined virtuals (DDP's reducer and its initial
  broadcast, functional ``all_reduce``/``broadcast``/``all_to_all_single``)
  reach our overrides as well.
* The inner backend of each device (:mod:`enforcer.comm.inner`) is also registered
  on the group, because DDP and the c10d dispatcher ops look one up per device
  ("No backend type associated with device type cpu" otherwise). Calls that go
  straight to it — ``torch.ops.c10d.*`` and the functional collectives whose
  C++ path is not trampolined (e.g. ``all_gather_tensor``,
  ``reduce_scatter_tensor``) — bypass the enforcer. :mod:`enforcer.group.bypass`
  counts them per op kind and logs each kind once; they are not hidden.
* Until a plan is installed every op goes to the inner backend unchanged (the
  same call with the same options): results are bit-identical. The op is
  recorded in the trace (:mod:`enforcer.trace`) with its issue time, and its
  completion is timestamped from the Work's future.
* With a plan (:mod:`enforcer.runtime.plan_runtime`), ops the plan names are handed to the
  dispatcher; every other op still passes through.

* With ``P2_SERVICE`` the default group holds the rank's link to the
  optimizer service (:mod:`enforcer.link`), started on it by :mod:`enforcer.register`
  (which also registers this class with torch) and closed with the group.

The inner backends of a group use its own store prefix, so ``new_group`` with
this backend gives each subgroup its own inner communicators.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup

from enforcer import groups, state
from enforcer.comm import inner
from enforcer.group import bypass
from enforcer.group.core import GroupCore
from enforcer.group.works import all_of, on_complete
from optimizer_service.plan import InvalidInputError
from optimizer_service.plan.trace import COMM_KINDS

BACKEND_NAME = "p2enforcer"


_DTYPE_NAMES: dict[torch.dtype, str] = {}


def _dtype(tensor: torch.Tensor) -> str:
    dtype = tensor.dtype
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


def _bytes(tensors) -> int:
    if len(tensors) == 1:
        return tensors[0].numel() * tensors[0].element_size()
    return sum(t.numel() * t.element_size() for t in tensors)


def _nested_bytes(lists) -> int:
    return sum(_bytes(ts) for ts in lists)


def _even(splits, tensor: torch.Tensor, size: int) -> bool:
    """No split sizes, or all equal (the functional all_to_all_single names them): only even all-to-alls are planned."""
    if not splits:
        return True
    return len(splits) == size and tensor.dim() > 0 and all(s * size == tensor.shape[0] for s in splits)


def _first(tensors) -> torch.Tensor | None:
    return tensors[0] if tensors else None


class EnforcerGroup(ProcessGroup, GroupCore):
    """One ``p2enforcer`` process group (the default group or a subgroup)."""

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: timedelta,
                 ranks: tuple[int, ...], name: str) -> None:
        super().__init__(rank, size)
        for device, backend in self._make_inner(store, rank, size, timeout, ranks, name).items():
            self._register_backend(torch.device(device), inner.backend_type(self.inner_names[device]), backend)
        self._default_device = "cpu" if "cpu" in self._inner else next(iter(self._inner))
        self._cpu = self._inner.get("cpu")
        self.tracer = state.reset_tracer(rank, size) if self.is_default else state.tracer()
        if self.is_default:
            self.tracer.inner_backends = dict(self.inner_names)
        self.runtime = None                     # enforcer.runtime.plan_runtime.PlanRuntime once a plan is installed
        groups.register(self)

    # -------------------------------------------------------------- plumbing
    def getBackendName(self) -> str:
        return BACKEND_NAME

    def _inner_for(self, tensor: torch.Tensor | None) -> dist.Backend:
        if self._cpu is not None and (tensor is None or tensor.is_cpu):
            return self._cpu
        device = self._default_device if tensor is None else tensor.device.type
        try:
            return self._inner[device]
        except KeyError:
            raise InvalidInputError(f"p2enforcer has no inner backend for {device} tensors; set "
                                    f"{inner.ENV_VAR} (e.g. cpu:gloo,{device}:gloo)") from None

    def _op(self, kind: str, tensor: torch.Tensor | None, nbytes: int, run: Callable[[dist.Backend], dist.Work],
            planned: tuple | None = None, root: int | None = None) -> dist.Work:
        """The common body of every op: record it in the trace (``tensor`` gives its dtype and
        picks the inner backend), hand it to the plan runtime when ``planned`` (the arguments
        :meth:`enforcer.runtime.plan_runtime.PlanRuntime.submit` takes) and a plan takes it, else ``run``
        it on the inner backend; the Work returned records the op's completion. A collective
        that cannot be planned is still shown to the runtime, which counts it."""
        bypass.entered()
        record = self.tracer.issue(kind, "" if tensor is None else _dtype(tensor), nbytes, self.ranks,
                                   self.group_label)
        if root is not None:
            record.root = root
        runtime = self.runtime
        if runtime is not None and (planned is not None or kind in COMM_KINDS):
            work = runtime.submit(kind, record, *(planned or ()))   # it counts the group's collectives
            if work is not None:
                return work
        tracer = self.tracer
        return on_complete(run(self._inner_for(tensor)), lambda: tracer.complete(record))

    # ---------------------------------------------------------- all-reduce
    def allreduce(self, tensors, opts=None):
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        if not isinstance(opts, dist.AllreduceOptions):
            opts = _allreduce_options(opts)
        return self._op("all_reduce", tensors[0], _bytes(tensors), lambda b: b.allreduce(tensors, opts),
                        planned=(tensors, opts))

    def allreduce_coalesced(self, tensors, opts=None):
        opts = opts or dist.AllreduceCoalescedOptions()
        return self._op("all_reduce_coalesced", _first(tensors), _bytes(tensors),
                        lambda b: b.allreduce_coalesced(tensors, opts))

    # ------------------------------------------------------- rooted ops
    def broadcast(self, tensors, opts=None):
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        if opts is None or isinstance(opts, int):
            root, opts = opts or 0, dist.BroadcastOptions()
            opts.rootRank = root
        return self._op("broadcast", tensors[0], _bytes(tensors), lambda b: b.broadcast(tensors, opts),
                        planned=(tensors, opts), root=opts.rootRank)

    def reduce(self, tensors, opts=None):
        opts = opts or dist.ReduceOptions()
        return self._op("reduce", tensors[0], _bytes(tensors), lambda b: b.reduce(tensors, opts))

    def gather(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.GatherOptions()
        return self._op("gather", input_tensors[0], _bytes(input_tensors) * self.size(),
                        lambda b: b.gather(output_tensors, input_tensors, opts))

    def scatter(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.ScatterOptions()
        return self._op("scatter", output_tensors[0], _bytes(output_tensors) * self.size(),
                        lambda b: b.scatter(output_tensors, input_tensors, opts))

    # ------------------------------------------------------------ gathers
    def allgather(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.AllgatherOptions()
        return self._op("all_gather", input_tensors[0], _nested_bytes(output_tensors),
                        lambda b: b.allgather(output_tensors, input_tensors, opts))

    def all_gather_single(self, output, input, opts=None):
        opts = opts or dist.AllgatherOptions()
        return self._op("all_gather_into_tensor", input, _bytes([output]),
                        lambda b: b._allgather_base(output, input, opts), planned=(output, input, opts))

    _allgather_base = all_gather_single

    def allgather_coalesced(self, output_lists, input_tensors, opts=None):
        opts = opts or dist.AllgatherOptions()
        return self._op("all_gather_coalesced", _first(input_tensors), _nested_bytes(output_lists),
                        lambda b: b.allgather_coalesced(output_lists, input_tensors, opts))

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        opts = opts or dist.AllgatherOptions()
        if len(outputs) == 1 and len(inputs) == 1:      # one pair is the single op (functional collectives, DTensor)
            return self.all_gather_single(outputs[0], inputs[0], opts)
        # The inner Backend's coalesced entry point is not exposed to Python:
        # one op per pair, in order, completing together.
        return self._op("all_gather_into_tensor_coalesced", _first(inputs), _bytes(outputs),
                        lambda b: all_of([b._allgather_base(out, inp, opts) for out, inp in zip(outputs, inputs)],
                                         outputs))

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    # ----------------------------------------------------- reduce-scatters
    def reduce_scatter(self, output_tensors, input_lists, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        return self._op("reduce_scatter", output_tensors[0], _nested_bytes(input_lists),
                        lambda b: b.reduce_scatter(output_tensors, input_lists, opts))

    def reduce_scatter_single(self, output, input, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        return self._op("reduce_scatter_tensor", input, _bytes([input]),
                        lambda b: b._reduce_scatter_base(output, input, opts), planned=(output, input, opts))

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        if len(outputs) == 1 and len(inputs) == 1:      # as all_gather_single_coalesced
            return self.reduce_scatter_single(outputs[0], inputs[0], opts)
        return self._op("reduce_scatter_tensor_coalesced", _first(inputs), _bytes(inputs),
                        lambda b: all_of([b._reduce_scatter_base(out, inp, opts)
                                          for out, inp in zip(outputs, inputs)], outputs))

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    # ---------------------------------------------------------- all-to-all
    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        opts = opts or dist.AllToAllOptions()
        even = _even(output_split_sizes, output, self.size()) and _even(input_split_sizes, input, self.size())
        return self._op("all_to_all_single", input, _bytes([input]),
                        lambda b: b.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts),
                        planned=(output, input, opts) if even else None)

    alltoall_base = all_to_all_single

    def alltoall(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.AllToAllOptions()
        return self._op("all_to_all", _first(input_tensors), _bytes(input_tensors),
                        lambda b: b.alltoall(output_tensors, input_tensors, opts))

    # ------------------------------------------------------------ barriers
    def barrier(self, opts=None):
        opts = opts or dist.BarrierOptions()
        return self._op("barrier", None, 0, lambda b: b.barrier(opts))

    def monitored_barrier(self, timeout=None, wait_all_ranks: bool = False):
        # Synchronous, no Work: recorded and completed here rather than through _op.
        bypass.entered()
        record = self.tracer.issue("monitored_barrier", "", 0, self.ranks, self.group_label)
        backend = self._inner_for(None)
        if timeout is None:
            backend.monitored_barrier(wait_all_ranks=wait_all_ranks)
        else:
            backend.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)
        self.tracer.complete(record)

    # ------------------------------------------------------- point-to-point
    def send(self, tensors, dst_rank, tag=0):
        return self._op("send", tensors[0], _bytes(tensors), lambda b: b.send(tensors, dst_rank, tag))

    def recv(self, tensors, src_rank, tag=0):
        return self._op("recv", tensors[0], _bytes(tensors), lambda b: b.recv(tensors, src_rank, tag))

    def recv_anysource(self, tensors, tag=0):
        return self._op("recv", tensors[0], _bytes(tensors), lambda b: b.recv_anysource(tensors, tag))

    # ------------------------------------------------------------ lifecycle
    def shutdown(self) -> None:
        self._close(abort=False)
        ProcessGroup.shutdown(self)

    def abort(self) -> None:
        self._close(abort=True)
        ProcessGroup.abort(self)


def _allreduce_options(op) -> dist.AllreduceOptions:
    opts = dist.AllreduceOptions()
    if op is not None:
        opts.reduceOp = op
    return opts
