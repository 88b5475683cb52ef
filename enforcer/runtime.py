"""Enforcing a plan: ordered dispatch of motifs over channels (Syndicate §5, Pseudocode 2).

:func:`install` checks a :class:`~optimizer_service.plan_file.Plan` against the group and
builds, collectively and before any op uses them, one bare inner backend per
(channel, member set) the plan's motifs need — only members take part, in one
sorted order on every rank, each channel's backends bound to its network
interface. A plan that does not fit the job raises :class:`PlanError` and the
group stays as it was.

Then each op the plan names (its key: sequence number in the iteration within
the group, kind, buffer bytes, group) is *submitted* instead of being passed
through; ops the plan does not name still pass through. Submission only
records the op and returns a Work that completes with the op's last motif.

**Dispatcher** (one thread per group; Pseudocode 2). It walks the iteration's
motifs in the plan's order numbers. For the next motif it waits until its op
has been submitted and measures that wait (the optimizer's replanning signal,
in the trace as ``waits``). It then hands the motif to its channel's worker.
Motifs with the same order number are handed over together and run at once
when their channels differ. Every rank hands over the same motifs in the same
order, which is what keeps collectives matched.

**Channel workers** (one thread per channel) run their motifs one after the
other; a motif first waits for the motifs its data depends on (the earlier
``Seq`` stages of its op, :meth:`OpPlan.dependencies`). Order numbers must
respect those dependencies, so the lowest unfinished motif can always run:
no deadlock between channels.

**Deadlock with the program.** Plan order may differ from submission order.
If the program waits for op A before it submits op B that the plan puts
first, the dispatcher would wait for B forever. Our reading: when the
dispatcher is blocked on an op not yet submitted and the program is blocked
in ``wait()`` on an op whose motifs are still undispatched, that op's motifs
are dispatched next (in their order). The decision depends only on the
program's own order of submissions and waits, so every rank takes it alike.

**Iterations.** ``enforcer.step()`` ends an iteration: motifs of planned ops
that never came are skipped (logged once) and the sequence numbers restart.
Without ``step()`` an iteration ends after the plan's last op of the group.

Motifs run on the op's *buffer* (:mod:`optimizer_service.plan_file`): all_reduce and
broadcast work in place on the tensor; all_gather_into_tensor copies the
input into its block of the output first; reduce_scatter_tensor reduces a copy
of the input and copies its own block out at the end; all_to_all_single reads
the input's and writes the output's ``(N, D)`` blocks. ``SUM`` reductions are
planned, and ``AVG`` on floating point as the sum divided by the group size at
the end (what FSDP2 asks for); anything else passes through.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist

from enforcer import inner, p2p
from optimizer_service.plan.op_plan import OpPlan, PLAN_KIND
from optimizer_service.plan.plan import Plan
from optimizer_service.plan import PlanError
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.motif import Motif

log = logging.getLogger("enforcer")


def load(plan) -> Plan:
    if isinstance(plan, Plan):
        return plan
    text = str(plan)
    if not text.lstrip().startswith("{"):
        path = Path(text)
        try:
            text = path.read_text()
        except OSError as error:
            raise PlanError(f"cannot read the plan file {path}: {error.strerror}") from None
    return Plan.parse(text)


def install(group, plan) -> None:
    plan = load(plan)
    plan.check_world(group.size() if group.is_default else dist.get_world_size())
    runtime = PlanRuntime(group, plan)
    group.replace_runtime(runtime)
    log.info("p2enforcer: plan version %d installed on group %s (%d ops, channels %s)", plan.version,
             list(group.ranks), len(runtime.ops), sorted(runtime.comms_by_channel))


@dataclass
class _Iteration:
    """The planned ops the program submitted in one iteration, by plan op index."""

    ops: dict = field(default_factory=dict)
    closed: bool = False


@dataclass
class _Submitted:
    """One planned op of this iteration, as submitted."""

    op_index: int
    op: OpPlan
    buffer: torch.Tensor                     # flat, or (N, D) input blocks for all-to-all
    output: torch.Tensor | None              # all-to-all output blocks
    finish: object                           # callable run after the last motif
    result: list[torch.Tensor]
    record: object
    future: torch.futures.Future = field(default_factory=torch.futures.Future)
    done: list[threading.Event] = field(init=False)
    remaining: int = field(init=False)
    dispatched: set[int] = field(default_factory=set)
    waited: bool = False

    def __post_init__(self) -> None:
        self.done = [threading.Event() for _ in self.op.motifs]
        self.remaining = len(self.op.motifs)


def _average(op, tensor: torch.Tensor) -> bool:
    """AVG on floating point: planned as the sum, divided by the group size at the end."""
    return op == dist.ReduceOp.AVG and tensor.is_floating_point()


class PlannedWork(dist.Work):
    """The Work of a planned op: tells the dispatcher when the program waits on it."""

    def __init__(self, runtime: PlanRuntime, submitted: _Submitted) -> None:
        super().__init__()
        self._runtime = runtime
        self._submitted = submitted

    def wait(self, timeout=None) -> bool:
        self._runtime.waiting_on(self._submitted)
        self._submitted.future.wait()
        return True

    def is_completed(self) -> bool:
        return self._submitted.future.done()

    def is_success(self) -> bool:
        return self._submitted.future.done()

    def get_future(self) -> torch.futures.Future:
        return self._submitted.future

    def result(self) -> list[torch.Tensor]:
        return self._submitted.future.value()

    def synchronize(self) -> None:
        self.wait()


class PlanRuntime:
    def __init__(self, group, plan: Plan) -> None:
        self.group = group
        self.plan = plan
        self.me = group.rank()
        mine = tuple(group.ranks)
        self.ops: list[OpPlan] = [op for op in plan.ops if tuple(op.key.group) == mine]
        self.index = {(op.key.seq, op.key.kind): i for i, op in enumerate(self.ops)}
        self.last_seq = max((op.key.seq for op in self.ops), default=-1)
        self.slots = sorted((order, i, m) for i, op in enumerate(self.ops) for m, order in enumerate(op.order))
        self.dependencies = [op.dependencies() for op in self.ops]     # plan checks they come first
        self._validated: dict[tuple[int, int], bool] = {}
        group.installs += 1
        self.comms_by_channel = self._build_comms()
        self._cond = threading.Condition()
        self._iterations: deque[_Iteration] = deque([_Iteration()])
        self._seq = 0
        self._stepped = False
        self._stop = False
        self._warned_missing: set[int] = set()
        self._queues = {c: deque() for c in self.comms_by_channel}
        self._queue_cond = threading.Condition()
        self._workers = [threading.Thread(target=self._work, args=(c,), name=f"p2enforcer-ch{c}", daemon=True)
                         for c in self._queues]
        self._dispatcher = threading.Thread(target=self._dispatch, name="p2enforcer-dispatch", daemon=True)
        for thread in (*self._workers, self._dispatcher):
            thread.start()

    # ------------------------------------------------------------ preparation
    def _build_comms(self) -> dict[int, dict[tuple[int, ...], p2p.BackendPeers]]:
        """Every (channel, member set) backend, made by its members in one sorted order."""
        global_rank = self.group.ranks[self.me]
        wanted: dict[int, set[tuple[int, ...]]] = {c: set() for c in self.plan.channels}
        for op in self.ops:
            for motif in op.motifs:
                members = tuple(sorted(op.key.group[p] for p in motif.ranks))
                if len(members) > 1:
                    wanted[motif.channel].add(members)
        comms: dict[int, dict[tuple[int, ...], p2p.BackendPeers]] = {c: {} for c in wanted}
        name = self.inner_name()
        for channel in sorted(wanted):
            interface = self.plan.channels.get(channel)
            for members in sorted(wanted[channel]):
                if global_rank not in members:
                    continue
                # Installs are collective, so their count names the same store keys on every rank;
                # the plan version alone does not (a plan may be installed twice).
                prefix = (f"p2plan/{self.group.installs}/v{self.plan.version}/ch{channel}/"
                          f"{'-'.join(map(str, members))}/")
                store = dist.PrefixStore(prefix, self.group.store)
                try:
                    backend = inner.create(name, store, members.index(global_rank), len(members),
                                           self.group.timeout, interface=interface)
                except RuntimeError as error:
                    raise PlanError(f"channel {channel}: cannot make a {name} backend for ranks {list(members)}"
                                    f" on interface {interface!r}: {str(error).splitlines()[0]}") from None
                comms[channel][members] = p2p.BackendPeers(backend, members, global_rank)
        return comms

    def inner_name(self) -> str:
        return self.group.inner_names.get("cpu", next(iter(self.group.inner_names.values())))

    # -------------------------------------------------------------- submit
    def submit(self, kind: str, record, *args) -> dist.Work | None:
        """Take over an op the plan names; ``None`` means: pass it through."""
        with self._cond:
            seq = self._seq
            self._seq += 1
            iteration = self._iterations[-1]
            last = not self._stepped and seq >= self.last_seq
            if last:            # no step(): the iteration ends after the plan's last op
                self._iterations.append(_Iteration())
                self._seq = 0
        op_index = self.index.get((seq, PLAN_KIND.get(kind, kind)))
        submitted = None if op_index is None else self._prepare(op_index, self.ops[op_index], kind, record, args)
        with self._cond:
            if submitted is not None:
                record.enforced = True
                iteration.ops[op_index] = submitted
            iteration.closed = iteration.closed or last
            self._cond.notify_all()
        return None if submitted is None else PlannedWork(self, submitted)

    def _prepare(self, op_index: int, op: OpPlan, kind: str, record, args) -> _Submitted | None:
        size = self.group.size()
        if kind in ("all_reduce", "broadcast"):
            tensors, opts = args
            if len(tensors) != 1 or not tensors[0].is_contiguous() or tensors[0].device.type != "cpu":
                return None
            tensor = tensors[0]
            average = kind == "all_reduce" and _average(opts.reduceOp, tensor)
            if kind == "all_reduce" and opts.reduceOp != dist.ReduceOp.SUM and not average:
                return None
            if kind == "broadcast" and opts.rootRank != op.key.root:
                return None
            if not self._fits(op_index, op, tensor.numel(), tensor.numel() * tensor.element_size()):
                return None
            finish = (lambda tensor=tensor: tensor.div_(size)) if average else None
            return _Submitted(op_index, op, tensor.view(-1), None, finish, [tensor], record)
        if kind == "all_gather_into_tensor":
            output, input, _opts = args
            if not (output.is_contiguous() and input.is_contiguous()) or output.numel() != size * input.numel():
                return None
            if not self._fits(op_index, op, input.numel(), output.numel() * output.element_size()):
                return None
            flat = output.view(-1)
            n = input.numel()
            flat[self.me * n:(self.me + 1) * n].copy_(input.view(-1))
            return _Submitted(op_index, op, flat, None, None, [output], record)
        if kind == "reduce_scatter_tensor":
            output, input, opts = args
            average = _average(opts.reduceOp, input)
            if (opts.reduceOp != dist.ReduceOp.SUM and not average) or input.numel() != size * output.numel() \
                    or not output.is_contiguous():
                return None
            if not self._fits(op_index, op, output.numel(), input.numel() * input.element_size()):
                return None
            buffer = input.reshape(-1).clone()
            n = output.numel()

            def finish(buffer=buffer, output=output, n=n, average=average):
                output.view(-1).copy_(buffer[self.me * n:(self.me + 1) * n])
                if average:
                    output.div_(size)
            return _Submitted(op_index, op, buffer, None, finish, [output], record)
        if kind == "all_to_all_single":
            output, input, _opts = args
            if input.numel() % size or output.numel() != input.numel() or not output.is_contiguous():
                return None
            if not self._fits(op_index, op, input.numel(), input.numel() * input.element_size()):
                return None
            return _Submitted(op_index, op, input.reshape(size, -1), output.view(size, -1), None, [output], record)
        return None

    def _fits(self, op_index: int, op: OpPlan, elements: int, nbytes: int) -> bool:
        key = (op_index, elements)
        if key not in self._validated:
            ok = nbytes == op.key.nbytes
            if ok:
                try:
                    op.validate(elements)
                except PlanError as error:
                    log.error("p2enforcer: %s; passing the op through", error)
                    ok = False
            self._validated[key] = ok
        return self._validated[key]

    def waiting_on(self, submitted: _Submitted) -> None:
        with self._cond:
            submitted.waited = True
            self._cond.notify_all()

    # ---------------------------------------------------------- iterations
    def step(self) -> None:
        """The program finished an iteration: what never came is skipped; sequence numbers restart."""
        with self._cond:
            self._stepped = True
            if self._seq == 0 and not self._iterations[-1].ops:
                return          # the iteration already ended after the plan's last op
            self._iterations[-1].closed = True
            self._iterations.append(_Iteration())
            self._seq = 0
            self._cond.notify_all()

    def close(self, abort: bool = False) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        with self._queue_cond:
            self._queue_cond.notify_all()
        if abort:
            return
        for thread in (self._dispatcher, *self._workers):
            thread.join(timeout=5)
        # Release the channel backends now, not at interpreter exit (where gloo's
        # destructors can run after the threads they join are gone).
        for comms in self.comms_by_channel.values():
            for peers in comms.values():
                peers.backend.shutdown()
            comms.clear()

    # ----------------------------------------------------------- dispatcher
    def _dispatch(self) -> None:
        while not self._stop:
            iteration = self._iterations[0]
            for order, op_index, motif_index in self.slots:
                submitted = self._next(iteration, order, op_index)
                if submitted is None:
                    if self._stop:
                        return
                    self._missing(op_index)
                elif motif_index not in submitted.dispatched:
                    self._hand_over(submitted, motif_index)
            with self._cond:
                while not iteration.closed and not self._stop:
                    self._cond.wait()
                if len(self._iterations) > 1:
                    self._iterations.popleft()

    def _next(self, iteration: _Iteration, order: int, op_index: int) -> _Submitted | None:
        """Wait for planned op ``op_index`` (measuring the wait); ``None`` if the
        iteration closed without it. Promotes waited-on ops meanwhile."""
        started = time.perf_counter()
        while True:
            with self._cond:
                while not self._stop and op_index not in iteration.ops and not iteration.closed \
                        and self._waited_undispatched(iteration) is None:
                    self._cond.wait()
                submitted = iteration.ops.get(op_index)
                promoted = None if submitted is not None or self._stop else self._waited_undispatched(iteration)
            if promoted is None:
                break
            for m in sorted(range(len(promoted.op.motifs)), key=lambda m: promoted.op.order[m]):
                if m not in promoted.dispatched:
                    self._hand_over(promoted, m)
        waited = time.perf_counter() - started
        if waited > 1e-5:
            self.group.tracer.wait(order, waited)
        return submitted

    @staticmethod
    def _waited_undispatched(iteration: _Iteration) -> _Submitted | None:
        for submitted in iteration.ops.values():
            if submitted.waited and len(submitted.dispatched) < len(submitted.op.motifs):
                return submitted
        return None

    def _missing(self, op_index: int) -> None:
        if op_index not in self._warned_missing:
            self._warned_missing.add(op_index)
            key = self.ops[op_index].key
            log.warning("p2enforcer: planned op %d (%s, %d bytes) did not come in this iteration; "
                        "its motifs are skipped", key.seq, key.kind, key.nbytes)

    def _hand_over(self, submitted: _Submitted, motif_index: int) -> None:
        submitted.dispatched.add(motif_index)
        motif = submitted.op.motifs[motif_index]
        if self.me not in motif.ranks:
            self._finished(submitted, motif_index)
            return
        with self._queue_cond:
            self._queues[motif.channel].append((submitted, motif_index))
            self._queue_cond.notify_all()

    # -------------------------------------------------------------- workers
    def _work(self, channel: int) -> None:
        queue = self._queues[channel]
        while True:
            with self._queue_cond:
                while not queue and not self._stop:
                    self._queue_cond.wait()
                if self._stop and not queue:
                    return
                submitted, motif_index = queue.popleft()
            for before in self.dependencies[submitted.op_index][motif_index]:
                submitted.done[before].wait()
            try:
                self._run(submitted, submitted.op.motifs[motif_index], channel)
            except Exception as error:  # noqa: BLE001 — handed to whoever waits on the op
                log.error("p2enforcer: motif %s of op %d failed: %s", submitted.op.motifs[motif_index],
                          submitted.op.key.seq, error)
                if not submitted.future.done():
                    submitted.future.set_exception(error)
            self._finished(submitted, motif_index)

    def _finished(self, submitted: _Submitted, motif_index: int) -> None:
        submitted.done[motif_index].set()
        with self._cond:
            submitted.remaining -= 1
            last = submitted.remaining == 0
        if last and not submitted.future.done():
            if submitted.finish is not None:
                submitted.finish()
            self.group.tracer.complete(submitted.record)
            submitted.future.set_result(submitted.result)

    def _run(self, submitted: _Submitted, motif: Motif, channel: int) -> None:
        group = submitted.op.key.group
        members = [group[p] for p in motif.ranks]
        if len(members) == 1 and motif.kind is not Collective.ALL_TO_ALL:
            return
        peers = self.comms_by_channel[channel][tuple(sorted(members))]
        buffer = submitted.buffer
        if motif.kind is Collective.ALL_TO_ALL:
            p2p.all_to_all(buffer, submitted.output, motif.ranges[0], motif.window, members, peers)
        elif motif.kind is Collective.REDUCE_SCATTER:
            p2p.reduce_scatter([buffer[a:b] for a, b in motif.ranges], members, peers)
        elif motif.kind is Collective.ALL_GATHER:
            p2p.all_gather([buffer[a:b] for a, b in motif.ranges], members, peers)
        else:
            (lo, hi), = motif.ranges
            data = buffer[lo:hi]
            if not data.numel():
                return
            if motif.kind is Collective.ALL_REDUCE:
                peers.backend.allreduce([data]).wait()
            elif motif.kind is Collective.REDUCE:
                p2p.reduce(data, members, peers)
            else:
                p2p.broadcast(data, members, peers)
