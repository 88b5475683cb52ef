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
* The inner backend of each device (:mod:`enforcer.inner`) is also registered
  on the group, because DDP and the c10d dispatcher ops look one up per device
  ("No backend type associated with device type cpu" otherwise). Calls that go
  straight to it — ``torch.ops.c10d.*`` and the functional collectives whose
  C++ path is not trampolined (e.g. ``all_gather_tensor``,
  ``reduce_scatter_tensor``) — bypass the enforcer. :mod:`enforcer.bypass`
  counts them per op kind and logs each kind once; they are not hidden.
* Until a plan is installed every op goes to the inner backend unchanged (the
  same call with the same options): results are bit-identical. The op is
  recorded in the trace (:mod:`enforcer.trace`) with its issue time, and its
  completion is timestamped from the Work's future.
* With a plan (:mod:`enforcer.runtime`), ops the plan names are handed to the
  dispatcher; every other op still passes through.

The inner backends of a group use its own store prefix, so ``new_group`` with
this backend gives each subgroup its own inner communicators.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup

from enforcer import inner, state
from enforcer.works import TrackedWork, all_of, on_complete

log = logging.getLogger("enforcer")

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


class EnforcerGroup(ProcessGroup):
    """One ``p2enforcer`` process group (the default group or a subgroup)."""

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: timedelta,
                 ranks: tuple[int, ...], name: str) -> None:
        super().__init__(rank, size)
        self.store = store
        self.timeout = timeout
        self.ranks = ranks                      # global ranks, in group-rank order
        self.group_label = name
        self.inner_names = inner.configured(state.settings().inner_backend)
        self._inner: dict[str, dist.Backend] = {}
        for device, backend_name in self.inner_names.items():
            backend = inner.create(backend_name, dist.PrefixStore(f"p2inner/{device}/", store), rank, size, timeout)
            self._inner[device] = backend
            self._register_backend(torch.device(device), inner.backend_type(backend_name), backend)
        self._default_device = "cpu" if "cpu" in self._inner else next(iter(self._inner))
        self._cpu = self._inner.get("cpu")
        # The default group is made before torch counts as initialized.
        self.is_default = not dist.is_initialized()
        self.tracer = state.reset_tracer(rank, size) if self.is_default else state.tracer()
        self.runtime = None                     # enforcer.runtime.PlanRuntime once a plan is installed
        self.installs = 0                       # plans installed so far (names their store keys)
        state.register_group(self)
        plan_file = state.settings().plan_file
        if self.is_default and plan_file:
            self._install_from_env(plan_file)

    def _install_from_env(self, path: str) -> None:
        """``P2_PLAN_FILE``: the plan to enforce from the first op on; one that does
        not fit the job is logged and the group stays in passthrough."""
        from optimizer_service.plan import PlanError
        from enforcer.runtime import install
        try:
            install(self, path)
        except PlanError as error:
            log.error("p2enforcer: P2_PLAN_FILE=%s not installed, passing every op through: %s", path, error)

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
            raise RuntimeError(f"p2enforcer has no inner backend for {device} tensors; set "
                               f"{inner.ENV_VAR} (e.g. cpu:gloo,{device}:gloo)") from None

    def inner_backend(self, device: str = "cpu") -> dist.Backend:
        return self._inner[device]

    def _issue(self, kind: str, tensor: torch.Tensor | None, nbytes: int):
        state.entered()
        return self.tracer.issue(kind, "" if tensor is None else _dtype(tensor), nbytes, self.ranks,
                                 self.group_label)

    def _collective(self, work: dist.Work, record) -> dist.Work:
        tracer = self.tracer
        return on_complete(work, lambda: tracer.complete(record))

    def _p2p(self, work: dist.Work, record) -> dist.Work:
        tracer = self.tracer
        return TrackedWork(work, lambda: tracer.complete(record))

    def _planned(self, kind: str, record, *args):
        runtime = self.runtime
        return None if runtime is None else runtime.submit(kind, record, *args)

    # ---------------------------------------------------------- all-reduce
    def allreduce(self, tensors, opts=None):
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        if not isinstance(opts, dist.AllreduceOptions):
            opts = _allreduce_options(opts)
        record = self._issue("all_reduce", tensors[0], _bytes(tensors))
        work = self._planned("all_reduce", record, tensors, opts)
        if work is not None:
            return work
        return self._collective(self._inner_for(tensors[0]).allreduce(tensors, opts), record)

    def allreduce_coalesced(self, tensors, opts=None):
        opts = opts or dist.AllreduceCoalescedOptions()
        record = self._issue("all_reduce_coalesced", tensors[0] if tensors else None, _bytes(tensors))
        return self._collective(self._inner_for(tensors[0] if tensors else None).allreduce_coalesced(tensors, opts),
                                record)

    # ------------------------------------------------------- rooted ops
    def broadcast(self, tensors, opts=None):
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        if opts is None or isinstance(opts, int):
            root, opts = opts or 0, dist.BroadcastOptions()
            opts.rootRank = root
        record = self._issue("broadcast", tensors[0], _bytes(tensors))
        record.root = opts.rootRank
        work = self._planned("broadcast", record, tensors, opts)
        if work is not None:
            return work
        return self._collective(self._inner_for(tensors[0]).broadcast(tensors, opts), record)

    def reduce(self, tensors, opts=None):
        opts = opts or dist.ReduceOptions()
        record = self._issue("reduce", tensors[0], _bytes(tensors))
        return self._collective(self._inner_for(tensors[0]).reduce(tensors, opts), record)

    def gather(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.GatherOptions()
        record = self._issue("gather", input_tensors[0], _bytes(input_tensors) * self.size())
        return self._collective(self._inner_for(input_tensors[0]).gather(output_tensors, input_tensors, opts),
                                record)

    def scatter(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.ScatterOptions()
        record = self._issue("scatter", output_tensors[0], _bytes(output_tensors) * self.size())
        return self._collective(self._inner_for(output_tensors[0]).scatter(output_tensors, input_tensors, opts),
                                record)

    # ------------------------------------------------------------ gathers
    def allgather(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.AllgatherOptions()
        record = self._issue("all_gather", input_tensors[0], _nested_bytes(output_tensors))
        return self._collective(self._inner_for(input_tensors[0]).allgather(output_tensors, input_tensors, opts),
                                record)

    def all_gather_single(self, output, input, opts=None):
        opts = opts or dist.AllgatherOptions()
        record = self._issue("all_gather_into_tensor", input, _bytes([output]))
        work = self._planned("all_gather_into_tensor", record, output, input, opts)
        if work is not None:
            return work
        return self._collective(self._inner_for(input)._allgather_base(output, input, opts), record)

    _allgather_base = all_gather_single

    def allgather_coalesced(self, output_lists, input_tensors, opts=None):
        opts = opts or dist.AllgatherOptions()
        record = self._issue("all_gather_coalesced", input_tensors[0] if input_tensors else None,
                             _nested_bytes(output_lists))
        backend = self._inner_for(input_tensors[0] if input_tensors else None)
        return self._collective(backend.allgather_coalesced(output_lists, input_tensors, opts), record)

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        opts = opts or dist.AllgatherOptions()
        record = self._issue("all_gather_into_tensor_coalesced", inputs[0] if inputs else None, _bytes(outputs))
        backend = self._inner_for(inputs[0] if inputs else None)
        # The inner Backend's coalesced entry point is not exposed to Python:
        # one op per pair, in order, completing together.
        works = [backend._allgather_base(out, inp, opts) for out, inp in zip(outputs, inputs)]
        return self._collective(all_of(works, outputs), record)

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    # ----------------------------------------------------- reduce-scatters
    def reduce_scatter(self, output_tensors, input_lists, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        record = self._issue("reduce_scatter", output_tensors[0], _nested_bytes(input_lists))
        return self._collective(self._inner_for(output_tensors[0]).reduce_scatter(output_tensors, input_lists, opts),
                                record)

    def reduce_scatter_single(self, output, input, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        record = self._issue("reduce_scatter_tensor", input, _bytes([input]))
        work = self._planned("reduce_scatter_tensor", record, output, input, opts)
        if work is not None:
            return work
        return self._collective(self._inner_for(input)._reduce_scatter_base(output, input, opts), record)

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        record = self._issue("reduce_scatter_tensor_coalesced", inputs[0] if inputs else None, _bytes(inputs))
        backend = self._inner_for(inputs[0] if inputs else None)
        works = [backend._reduce_scatter_base(out, inp, opts) for out, inp in zip(outputs, inputs)]
        return self._collective(all_of(works, outputs), record)

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    # ---------------------------------------------------------- all-to-all
    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        opts = opts or dist.AllToAllOptions()
        record = self._issue("all_to_all_single", input, _bytes([input]))
        if not output_split_sizes and not input_split_sizes:
            work = self._planned("all_to_all_single", record, output, input, opts)
            if work is not None:
                return work
        backend = self._inner_for(input)
        return self._collective(backend.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts),
                                record)

    alltoall_base = all_to_all_single

    def alltoall(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.AllToAllOptions()
        record = self._issue("all_to_all", input_tensors[0] if input_tensors else None, _bytes(input_tensors))
        backend = self._inner_for(input_tensors[0] if input_tensors else None)
        return self._collective(backend.alltoall(output_tensors, input_tensors, opts), record)

    # ------------------------------------------------------------ barriers
    def barrier(self, opts=None):
        opts = opts or dist.BarrierOptions()
        record = self._issue("barrier", None, 0)
        return self._collective(self._inner_for(None).barrier(opts), record)

    def monitored_barrier(self, timeout=None, wait_all_ranks: bool = False):
        record = self._issue("monitored_barrier", None, 0)
        backend = self._inner_for(None)
        if timeout is None:
            backend.monitored_barrier(wait_all_ranks=wait_all_ranks)
        else:
            backend.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)
        self.tracer.complete(record)

    # ------------------------------------------------------- point-to-point
    def send(self, tensors, dst_rank, tag=0):
        record = self._issue("send", tensors[0], _bytes(tensors))
        return self._p2p(self._inner_for(tensors[0]).send(tensors, dst_rank, tag), record)

    def recv(self, tensors, src_rank, tag=0):
        record = self._issue("recv", tensors[0], _bytes(tensors))
        return self._p2p(self._inner_for(tensors[0]).recv(tensors, src_rank, tag), record)

    def recv_anysource(self, tensors, tag=0):
        record = self._issue("recv", tensors[0], _bytes(tensors))
        return self._p2p(self._inner_for(tensors[0]).recv_anysource(tensors, tag), record)

    # ------------------------------------------------------------ lifecycle
    def replace_runtime(self, runtime=None, abort: bool = False) -> None:
        """Enforce ``runtime`` from now on (``None``: passthrough); the old one is closed."""
        old, self.runtime = self.runtime, runtime
        if old is not None:
            old.close(abort=abort)

    def shutdown(self) -> None:
        state.unregister_group(self)
        self.replace_runtime(None)
        if self.is_default:
            state.export_from_env()
        ProcessGroup.shutdown(self)

    def abort(self) -> None:
        state.unregister_group(self)
        self.replace_runtime(None, abort=True)
        ProcessGroup.abort(self)


def _allreduce_options(op) -> dist.AllreduceOptions:
    opts = dist.AllreduceOptions()
    if op is not None:
        opts.reduceOp = op
    return opts


def create(backend_options: dist.distributed_c10d._DistributedBackendOptions, _pg_options=None) -> EnforcerGroup:
    """torch's creator hook (``extended_api=True``: it tells us the group's global ranks)."""
    size = backend_options.group_size
    ranks = tuple(backend_options.global_ranks_in_group) or tuple(range(size))
    if len(ranks) != size:
        ranks = tuple(range(size))
    group = EnforcerGroup(backend_options.store, backend_options.group_rank, size, backend_options.timeout,
                          ranks, str(backend_options.group_id))
    return group


def register() -> None:
    """Register ``p2enforcer`` with torch.distributed (idempotent)."""
    if BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND_NAME, create, extended_api=True, devices=["cpu", "cuda"])
    _accept_monitored_barrier()


def _accept_monitored_barrier() -> None:
    """torch's ``dist.monitored_barrier`` refuses every backend not named
    "gloo" before it reaches the group; ours runs it on the inner gloo. The
    replacement handles enforcer groups and defers to torch's for all others."""
    original = dist.monitored_barrier
    if getattr(original, "_p2enforcer", False):
        return

    def monitored_barrier(group=None, timeout=None, wait_all_ranks: bool = False):
        target = dist.group.WORLD if group is None else group
        if isinstance(target, EnforcerGroup):
            return target.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)
        return original(group, timeout=timeout, wait_all_ranks=wait_all_ranks)

    monitored_barrier.__doc__ = original.__doc__
    monitored_barrier._p2enforcer = True
    dist.monitored_barrier = monitored_barrier
    dist.distributed_c10d.monitored_barrier = monitored_barrier
