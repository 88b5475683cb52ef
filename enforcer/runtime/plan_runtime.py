"""Enforcing a plan: ordered dispatch of motifs over channels (Syndicate §5, Pseudocode 2).

:func:`install` checks a :class:`~optimizer_service.plan.Plan` against the group,
builds a :class:`PlanRuntime` and starts it. Building makes, collectively and
before any op uses them, one bare inner backend per (channel, member set) the
plan's motifs need — only members take part, in one sorted order on every
rank, each channel's backends bound to its network interface. A plan that does
not fit the job raises :class:`PlanError` and the group stays as it was.
:meth:`PlanRuntime.start` then starts its threads (none run before).

Then each op the plan names (its key: sequence number in the iteration within
the group, kind, buffer bytes, group) is *submitted* instead of being passed
through; ops the plan does not name still pass through. Submission only
records the op and returns a Work that completes with the op's last motif.

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
other; a motif first waits for the motifs its data depends on (the earlier
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
from enforcer import state

from enforcer.comm import inner, sendrecv
from enforcer.runtime import dispatch, ucc_motifs
from enforcer.runtime.buffers import BUFFERS, OpBuffer
from optimizer_service.plan import PLAN_KIND, Collective, Motif, OpPlan, Plan, PlanError
from optimizer_service.plan.trace import OpRecord

log = logging.getLogger("enforcer")


def channel_interface(plan: Plan, channel: int, nics: tuple[str, ...]) -> str | None:
    """The network interface ``channel``'s backends are bound to: the one the plan
    names, else this node's NIC for the channel (``P2_CHANNEL_IFNAMES``, one per
    channel: the node knows its NICs, a plan made for the whole cluster does not),
    else None (the inner backend's default, which honours ``GLOO_SOCKET_IFNAME``)."""
    named = plan.channels.get(channel)
    if named:
        return named
    return nics[channel] if channel < len(nics) else None


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
    """One group's installed plan: submission of its ops, the dispatcher and the channel workers.

    Building it makes the channel backends (collective); :meth:`start` starts
    the threads; :meth:`close` stops them and releases the backends.
    """

    def __init__(self, group, plan: Plan, store_prefix: str | None = None, store: dist.Store | None = None) -> None:
        """Build ``plan``'s channel backends for ``group`` (collective among each
        backend's members). Their store keys start with ``store_prefix`` — a plan
        the service prepares names it by its version, unique in the job, so ranks
        that build it at different moments meet (:mod:`enforcer.link.prepare`) — else
        with the count of installs on the group. ``store``: where to meet (default:
        the group's)."""
        self.group = group
        self.plan = plan
        self._store = group.store if store is None else store
        if store_prefix is None:
            group.installs += 1
            # Installs are collective, so their count names the same store keys on every rank;
            # the plan version alone does not (a plan may be installed twice).
            store_prefix = f"p2plan/{group.installs}/v{plan.version}/"
        self._store_prefix = store_prefix
        self.me = group.rank()
        mine = tuple(group.ranks)
        self.ops: list[OpPlan] = [op for op in plan.ops if tuple(op.key.group) == mine]
        self.index = {(op.key.seq, op.key.kind): i for i, op in enumerate(self.ops)}
        self.last_seq = max((op.key.seq for op in self.ops), default=-1)
        self.schedule = dispatch.Schedule.of([op.order for op in self.ops])
        self.dependencies = [op.dependencies() for op in self.ops]     # plan checks they come first
        self._validated: dict[tuple[int, int], bool] = {}
        self.comms_by_channel = self._build_comms()
        self._cond = threading.Condition()
        self._iterations: deque[_Iteration] = deque([_Iteration()])
        self._seq = 0
        self._stepped = False
        self._stop = False
        self._warned_missing: set[int] = set()
        self._queues: dict[int, deque[tuple[_Submitted, int]]] = {c: deque() for c in self.comms_by_channel}
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

    # ------------------------------------------------------------ preparation
    def _build_comms(self) -> dict[int, dict[tuple[int, ...], sendrecv.BackendPeers]]:
        """Every (channel, member set) backend, made by its members in one sorted order."""
        global_rank = self.group.ranks[self.me]
        wanted: dict[int, set[tuple[int, ...]]] = {c: set() for c in self.plan.channels}
        for op in self.ops:
            for motif in op.motifs:
                members = tuple(sorted(op.key.group[p] for p in motif.ranks))
                if len(members) > 1:
                    wanted[motif.channel].add(members)
        comms: dict[int, dict[tuple[int, ...], sendrecv.BackendPeers]] = {c: {} for c in wanted}
        nics = state.settings().channel_ifnames
        self.channel_backends = {c: self.channel_backend(c) for c in wanted}
        for channel in sorted(wanted):
            name = self.channel_backends[channel]
            interface = channel_interface(self.plan, channel, nics)
            for members in sorted(wanted[channel]):
                if global_rank not in members:
                    continue
                prefix = f"{self._store_prefix}ch{channel}/{'-'.join(map(str, members))}/"
                store = dist.PrefixStore(prefix, self._store)
                try:
                    backend = inner.create(name, store, members.index(global_rank), len(members),
                                           self.group.timeout, interface=interface)
                except (RuntimeError, ValueError) as error:     # ValueError: e.g. UCC not built
                    _shut_down(comms)           # what was made so far
                    raise PlanError(f"channel {channel}: cannot make a {name} backend for ranks {list(members)}"
                                    f" on interface {interface!r}: {str(error).splitlines()[0]}") from None
                comms[channel][members] = sendrecv.BackendPeers(backend, members, global_rank)
        return comms

    def inner_name(self) -> str:
        return self.group.inner_names.get("cpu", next(iter(self.group.inner_names.values())))

    def channel_backend(self, channel: int) -> str:
        """The backend ``channel``'s motifs run on: ``P2_CHANNEL_BACKENDS``' entry for it, else the inner one."""
        names = state.settings().channel_backends
        return names[channel] if channel < len(names) else self.inner_name()

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
        # Release the channel backends now, not at interpreter exit (where gloo's
        # destructors can run after the threads they join are gone).
        _shut_down(self.comms_by_channel)

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
                self.run_motif(submitted.op, submitted.op.motifs[motif_index], submitted.io.buffer,
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

    def run_motif(self, op: OpPlan, motif: Motif, buffer: torch.Tensor, output: torch.Tensor | None) -> None:
        """Run ``motif`` of ``op`` on this rank over its channel's backend for the motif's members:
        the send/recv algorithms of :mod:`enforcer.comm.sendrecv`, or one UCC collective on a UCC channel.
        ``buffer``/``output``: the op's buffer (:mod:`enforcer.runtime.buffers`)."""
        members = [op.key.group[p] for p in motif.ranks]
        if len(members) == 1 and motif.kind is not Collective.ALL_TO_ALL:
            return
        peers = self.comms_by_channel[motif.channel][tuple(sorted(members))]
        if self.channel_backends.get(motif.channel) == "ucc":      # no send/recv: one UCC collective per motif
            ucc_motifs.run(motif, buffer, output, members, peers.rank, peers.backend)
            return
        if motif.kind is Collective.ALL_TO_ALL:
            sendrecv.all_to_all(buffer, output, motif.ranges[0], motif.window, members, peers)
        elif motif.kind is Collective.REDUCE_SCATTER:
            sendrecv.reduce_scatter([buffer[a:b] for a, b in motif.ranges], members, peers)
        elif motif.kind is Collective.ALL_GATHER:
            sendrecv.all_gather([buffer[a:b] for a, b in motif.ranges], members, peers)
        else:
            (lo, hi), = motif.ranges
            data = buffer[lo:hi]
            if not data.numel():
                return
            if motif.kind is Collective.ALL_REDUCE:
                peers.backend.allreduce([data]).wait()
            elif motif.kind is Collective.REDUCE:
                sendrecv.reduce(data, members, peers)
            else:
                sendrecv.broadcast(data, members, peers)


def valid(op: OpPlan, elements: int) -> bool:
    """Whether ``op``'s plan computes it on a buffer of ``elements`` (:meth:`OpPlan.validate`); why not is logged."""
    try:
        op.validate(elements)
    except PlanError as error:
        log.error("p2enforcer: %s; passing the op through", error)
        return False
    return True


def _shut_down(comms_by_channel: dict[int, dict[tuple[int, ...], sendrecv.BackendPeers]]) -> None:
    for comms in comms_by_channel.values():
        for peers in comms.values():
            peers.backend.shutdown()
        comms.clear()
