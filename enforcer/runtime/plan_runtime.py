"""Enforcing a plan: ordered dispatch of motifs over channels (Syndicate §5, Pseudocode 2).

:func:`enforcer.runtime.plan_file.install` checks a :class:`~optimizer_service.plan.Plan`
against the group, builds a :class:`PlanRuntime` and starts it. Building makes
the plan's channels (:mod:`enforcer.runtime.channels`), collectively and before
any op uses them: one bare inner backend per (channel, member set) the plan's
motifs need, each channel's bound to its network interface, and each channel's
motif runner. A plan that does not fit the job raises :class:`PlanError` and the
group stays as it was. :meth:`PlanRuntime.start` then starts its threads (none
run before).

Then each op the plan names (its key: sequence number in the iteration within
the group, kind, buffer bytes, group, and its dtype where the key names one) is
*submitted* instead of being passed through; ops the plan does not name still
pass through. An op whose dtype is not the one its key names passes through
too (logged once per op and dtype): motif ranges count elements, so a plan made
for 2-byte bfloat16 elements is not one for float16 ones of the same bytes.
Submission only records the op and returns a Work that completes with the op's
last motif.

**Dispatcher** (one thread per group; Pseudocode 2). It walks the iteration's
motifs in the plan's order numbers across the group's ops, waits for each
motif's op to be submitted (measuring the wait: the optimizer's replanning
signal, in the trace as ``waits``), and hands the motif to its channel's
worker. Motifs with the same order number are handed over together and run at
once when their channels differ. Every rank hands over the same motifs in the
same order, which is what keeps collectives matched. *What* to do next is
decided by the pure :func:`enforcer.runtime.dispatch.next_step`; the thread only
blocks, reads the clock and carries the decision out.

**Channel workers** (one thread per channel) run their motifs one after the
other through the channel's motif runner (:mod:`enforcer.runtime.motif_runner`);
a motif first waits for the motifs its data depends on (the earlier
``Seq`` stages of its op, :meth:`OpPlan.dependencies`). Order numbers must
respect those dependencies, so the lowest unfinished motif can always run:
no deadlock between channels.

**Deadlock with the program.** Plan order may differ from submission order.
If the program waits for op A before it submits op B that the plan puts
first, the dispatcher would wait for B forever. Our reading: when the
dispatcher is blocked on an op not yet submitted and the program is blocked
in ``wait()`` on an op whose motifs are still undispatched, that op's motifs
are dispatched next (in their order; :mod:`enforcer.runtime.dispatch`). The decision
depends only on the program's own order of submissions and waits, so every
rank takes it alike.

**Iterations.** ``enforcer.step()`` ends an iteration: motifs of planned ops
that never came are skipped (logged once) and the sequence numbers restart.
Without ``step()`` an iteration ends after the plan's last op of the group.

Motifs run on the op's *buffer*: how each planned op kind's tensors are seen
as that buffer, and how results are written back, is in :mod:`enforcer.runtime.buffers`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from enforcer.runtime import channels, dispatch
from enforcer.runtime.buffers import BUFFERS, OpBuffer
from enforcer.runtime.group_ops import group_ops, valid
from enforcer.runtime.protocol import RuntimeGroup
from optimizer_service.plan import PLAN_KIND, OpPlan, Plan
from optimizer_service.plan.trace import OpRecord

log = logging.getLogger("enforcer")


@dataclass
class _Iteration:
    """The planned ops the program submitted in one iteration, by plan op index
    (a :class:`enforcer.runtime.dispatch.Iteration`)."""

    ops: dict[int, _Submitted] = field(default_factory=dict)
    closed: bool = False


@dataclass
class _Submitted:
    """One planned op of this iteration, as submitted (a :class:`enforcer.runtime.dispatch.Submitted`)."""

    op_index: int
    op: OpPlan
    io: OpBuffer                             # its tensors as the motifs' buffer
    record: OpRecord
    future: torch.futures.Future = field(default_factory=torch.futures.Future)
    done: list[threading.Event] = field(init=False)
    remaining: int = field(init=False)
    dispatched: set[int] = field(default_factory=set)
    waited: bool = False
    waits: dict[int, float] = field(default_factory=dict)     # motif index -> the dispatcher's wait for it

    def __post_init__(self) -> None:
        self.done = [threading.Event() for _ in self.op.motifs]
        self.remaining = len(self.op.motifs)


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
    """One group's installed plan: submission of its ops, the dispatcher and the channel workers
    (a :class:`~enforcer.runtime.protocol.Runtime`).

    Building it makes the plan's channels (collective); :meth:`start` starts
    the threads; :meth:`close` stops them and releases the channels.
    """

    def __init__(self, group: RuntimeGroup, plan: Plan, store_prefix: str | None = None,
                 store: dist.Store | None = None) -> None:
        """Build ``plan``'s channels for ``group`` (collective among each backend's
        members), meeting under ``store_prefix``
        (:func:`enforcer.runtime.channels.store_prefix_of`) in ``store`` (default: the group's)."""
        self.group = group
        self.plan = plan
        store_prefix = channels.store_prefix_of(group, plan, store_prefix)
        self.me = group.rank()
        self.ops: list[OpPlan] = group_ops(plan, group.ranks)
        self.index = {(op.key.seq, op.key.kind): i for i, op in enumerate(self.ops)}
        self.last_seq = max((op.key.seq for op in self.ops), default=-1)
        self.schedule = dispatch.Schedule.of([op.order for op in self.ops])
        self.dependencies = [op.dependencies() for op in self.ops]     # plan checks they come first
        self._validated: dict[tuple[int, int], bool] = {}
        self.channels = channels.build(group, plan, self.ops, store_prefix, group.store if store is None else store)
        self._cond = threading.Condition()
        self._iterations: deque[_Iteration] = deque([_Iteration()])
        self._seq = 0
        self._stepped = False
        self._stop = False
        self._warned_missing: set[int] = set()
        self._warned_dtype: set[tuple[int, str]] = set()
        self._queues: dict[int, deque[tuple[_Submitted, int]]] = {c: deque() for c in self.channels}
        self._queue_cond = threading.Condition()
        self._threads: list[threading.Thread] = []
        self.from_service = False               # built for a plan the service prepared (enforcer.runtime.plan_groups)

    def start(self) -> None:
        """Start the dispatcher and one worker per channel (once)."""
        if self._threads:
            return
        self._threads = [threading.Thread(target=self._work, args=(c,), name=f"p2enforcer-ch{c}", daemon=True)
                         for c in self._queues]
        self._threads.append(threading.Thread(target=self._dispatch, name="p2enforcer-dispatch", daemon=True))
        for thread in self._threads:
            thread.start()

    # -------------------------------------------------------------- submit
    def submit(self, kind: str, record: OpRecord, *args) -> dist.Work | None:
        """Take over an op the plan names; ``None`` means: pass it through. Every
        collective of the group comes here (without ``args`` when it cannot be
        planned), so sequence numbers count what a plan's keys count: the
        group's collectives (:data:`optimizer_service.plan.trace.COMM_KINDS`) in the iteration."""
        with self._cond:
            seq = self._seq
            self._seq += 1
            iteration = self._iterations[-1]
            last = not self._stepped and seq >= self.last_seq
            if last:            # no step(): the iteration ends after the plan's last op
                self._iterations.append(_Iteration())
                self._seq = 0
        plan_kind = PLAN_KIND.get(kind)
        op_index = None if plan_kind is None or not args else self.index.get((seq, plan_kind))
        if op_index is not None and not self._dtype_fits(op_index, record.dtype):
            op_index = None
        submitted = None if op_index is None else self._prepare(op_index, self.ops[op_index], record, args)
        with self._cond:
            if submitted is not None:
                record.enforced = True
                iteration.ops[op_index] = submitted
            iteration.closed = iteration.closed or last
            self._cond.notify_all()
        return None if submitted is None else PlannedWork(self, submitted)

    def _prepare(self, op_index: int, op: OpPlan, record: OpRecord, args: tuple) -> _Submitted | None:
        """The op's tensors as its buffer (:mod:`enforcer.runtime.buffers`), or ``None``: they do not fit the plan."""
        io = BUFFERS[op.key.kind].adopt(args, op.key, self.group.size(), self.me)
        if io is None or not self._fits(op_index, op, io.elements, io.nbytes):
            return None
        io.begin()
        return _Submitted(op_index, op, io, record)

    def _dtype_fits(self, op_index: int, dtype: str) -> bool:
        """The op key names no dtype, or ``dtype``; why not is logged once per op and dtype."""
        key = self.ops[op_index].key
        if not key.dtype or key.dtype == dtype:
            return True
        with self._cond:
            first = (op_index, dtype) not in self._warned_dtype
            self._warned_dtype.add((op_index, dtype))
        if first:
            log.warning("p2enforcer: plan %s is for %s elements but the op's are %s; passing the op through",
                        key, key.dtype, dtype)
        return False

    def _fits(self, op_index: int, op: OpPlan, elements: int, nbytes: int) -> bool:
        key = (op_index, elements)
        if key not in self._validated:
            self._validated[key] = nbytes == op.key.nbytes and valid(op, elements)
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
        """Stop the threads (not waiting for them on ``abort``) and release the channel backends."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        with self._queue_cond:
            self._queue_cond.notify_all()
        if abort:
            return
        for thread in self._threads:
            thread.join(timeout=5)
        self.channels.shut_down()

    # ----------------------------------------------------------- dispatcher
    def _dispatch(self) -> None:
        """Walk iterations one after the other until stopped."""
        while True:
            with self._cond:
                if self._stop:
                    return
                iteration = self._iterations[0]
            if not self._walk(iteration):
                return
            with self._cond:
                if len(self._iterations) > 1:
                    self._iterations.popleft()

    def _walk(self, iteration: _Iteration) -> bool:
        """Dispatch one iteration as :func:`enforcer.runtime.dispatch.next_step` decides; False once stopped."""
        cursor = dispatch.Cursor()
        while True:
            with self._cond:
                while True:
                    if self._stop:
                        return False
                    step = dispatch.next_step(self.schedule, cursor, iteration, time.perf_counter())
                    cursor = step.cursor
                    if not step.blocked:
                        break
                    self._cond.wait()
                hand_over = [(iteration.ops[op_index], motif_index) for op_index, motif_index in step.hand_over]
            if step.waited is not None:
                self.group.tracer.wait(*step.waited)
                order, seconds = step.waited
                for submitted, motif_index in hand_over:
                    if submitted.op.order[motif_index] == order:
                        submitted.waits[motif_index] = seconds
            if step.missing is not None:
                self._missing(step.missing)
            for submitted, motif_index in hand_over:
                self._hand_over(submitted, motif_index)
            if step.finished:
                return True

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
        # Motifs copy into views the calling thread made, possibly under no_grad (an
        # autograd.Function's forward, as torch.distributed.nn's all_to_all_single): grad
        # mode is per thread, and in-place writes to such views with it on are refused.
        torch.set_grad_enabled(False)
        queue = self._queues[channel]
        runner = self.channels[channel].runner
        while True:
            with self._queue_cond:
                while not queue and not self._stop:
                    self._queue_cond.wait()
                if self._stop and not queue:
                    return
                submitted, motif_index = queue.popleft()
            for before in self.dependencies[submitted.op_index][motif_index]:
                submitted.done[before].wait()
            tracer = self.group.tracer
            try:        # whatever fails here reaches the op's waiter: a worker never dies
                start = tracer.now()
                runner.run(submitted.op, submitted.op.motifs[motif_index], submitted.io.buffer,
                           submitted.io.output)
                tracer.motif(submitted.record, submitted.op.order[motif_index], channel,
                             submitted.waits.get(motif_index, 0.0), start, tracer.now() - start)
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
            submitted.io.finish()
            self.group.tracer.complete(submitted.record)
            submitted.future.set_result(submitted.io.result)
