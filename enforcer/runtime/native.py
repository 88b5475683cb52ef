"""A plan run by the C++ backend: :class:`NativePlanRuntime` (``enforcer._native.PlanRuntime``, sources
``cpp_ext/enforcer/plan_runtime.*``, ``dispatch.*``, ``motifs.*``, ``op_buffer.*``).

Everything collective and everything checked once happens here, in Python, as
for the Python group (:class:`enforcer.runtime.plan_runtime.PlanRuntime`): the
plan is checked against the group, and its channels are built
(:mod:`enforcer.runtime.channels`: their backends made by their members in one
order). The plan is then handed to C++ as plain values, and from there on the
backend submits the ops the plan names without Python, a C++ dispatcher walks
the motifs in plan order (the twin of :func:`enforcer.runtime.dispatch.next_step`)
and C++ channel workers run them (the twins of :mod:`enforcer.comm.sendrecv` and
:mod:`enforcer.runtime.buffers`; on a UCC channel, ``P2_CHANNEL_BACKENDS``, of
:mod:`enforcer.runtime.ucc_motifs`: one UCC collective per motif through the
backend's v-collectives, since UCC has no send/recv). The waits and motif
records land in the C++ trace. The one call back into Python is
:meth:`OpPlan.validate` for an op size not seen before.
"""

from __future__ import annotations

import torch.distributed as dist

from enforcer.runtime import channels
from enforcer.runtime.group_ops import group_ops, valid
from enforcer.runtime.protocol import RuntimeGroup
from optimizer_service.plan import OpPlan, Plan


class NativePlanRuntime:
    """One group's installed plan, run in C++ (a :class:`~enforcer.runtime.protocol.Runtime`, with the
    life cycle of :class:`~enforcer.runtime.plan_runtime.PlanRuntime`); the C++ backend submits its ops."""

    def __init__(self, group: RuntimeGroup, plan: Plan, store_prefix: str | None = None,
                 store: dist.Store | None = None) -> None:
        from enforcer import _native
        self.group = group
        self.plan = plan
        store_prefix = channels.store_prefix_of(group, plan, store_prefix)
        self.me = group.rank()
        self.ops: list[OpPlan] = group_ops(plan, group.ranks)
        self.channels = channels.build(group, plan, self.ops, store_prefix, group.store if store is None else store)
        self.from_service = False               # built for a plan the service prepared (enforcer.runtime.plan_groups)
        ops = [(op.key.seq, op.key.kind, op.key.nbytes, op.key.dtype, op.key.root, list(op.key.group),
                [(motif.kind.value, motif.channel, list(motif.ranks), [tuple(r) for r in motif.ranges],
                  tuple(motif.window)) for motif in op.motifs],
                [list(before) for before in op.dependencies()]) for op in self.ops]
        # UCC has no send/recv: on a UCC channel each motif is one UCC collective (cpp_ext/enforcer/ucc_motifs.*).
        self.native = _native.PlanRuntime(ops, [list(op.order) for op in self.ops], self.me, self.channels.backends(),
                                          group.tracer.native, self._validate, self.channels.using("ucc"))

    def _validate(self, op_index: int, elements: int) -> bool:
        """OpPlan.validate for a size not seen before (the C++ side remembers the answer)."""
        return valid(self.ops[op_index], elements)

    def start(self) -> None:
        self.native.start()

    def step(self) -> None:
        self.native.step()

    def close(self, abort: bool = False) -> None:
        self.native.close(abort)
        if not abort:
            self.channels.shut_down()
