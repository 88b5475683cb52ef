"""A plan run by the C++ backend: :class:`NativePlanRuntime` (``enforcer._native.PlanRuntime``, sources
``cpp_ext/enforcer/plan_runtime.*``, ``dispatch.*``, ``motifs.*``, ``op_buffer.*``).

Everything collective and everything checked once happens here, in Python, as
for the Python group (:class:`enforcer.runtime.plan_runtime.PlanRuntime`, which this
extends): the plan is checked against the group, the channel backends are
made by their members in one order. The plan is then handed to C++ as plain
values, and from there on the backend submits the ops the plan names without
Python, a C++ dispatcher walks the motifs in plan order (the twin of
:func:`enforcer.runtime.dispatch.next_step`) and C++ channel workers run them (the
twins of :mod:`enforcer.comm.sendrecv` and :mod:`enforcer.runtime.buffers`; on a UCC channel,
``P2_CHANNEL_BACKENDS``, of :mod:`enforcer.runtime.ucc_motifs`: one UCC collective per
motif through the backend's v-collectives, since UCC has no send/recv). The
waits and motif records land in the C++ trace. The one call back into Python
is :meth:`OpPlan.validate` for an op size not seen before.
"""

from __future__ import annotations

from enforcer.runtime.plan_runtime import PlanRuntime, _shut_down, valid


class NativePlanRuntime(PlanRuntime):
    """One group's installed plan, run in C++ (same life cycle as :class:`PlanRuntime`)."""

    def __init__(self, group, plan, store_prefix: str | None = None, store=None) -> None:
        super().__init__(group, plan, store_prefix, store)
        from enforcer import _native
        ops = [(op.key.seq, op.key.kind, op.key.nbytes, op.key.root, list(op.key.group),
                [(motif.kind.value, motif.channel, list(motif.ranks), [tuple(r) for r in motif.ranges],
                  tuple(motif.window)) for motif in op.motifs],
                [list(before) for before in op.dependencies()]) for op in self.ops]
        comms = {(channel, members): peers.backend for channel, by_members in self.comms_by_channel.items()
                 for members, peers in by_members.items()}
        # UCC has no send/recv: on a UCC channel each motif is one UCC collective (cpp_ext/enforcer/ucc_motifs.*).
        ucc_channels = sorted(c for c, name in self.channel_backends.items() if name == "ucc")
        self.native = _native.PlanRuntime(ops, [list(op.order) for op in self.ops], self.me, comms,
                                          group.tracer.native, self._validate, ucc_channels)

    def _validate(self, op_index: int, elements: int) -> bool:
        """OpPlan.validate for a size not seen before (the C++ side remembers the answer)."""
        return valid(self.ops[op_index], elements)

    def start(self) -> None:
        self.native.start()

    def submit(self, kind, record, *args):
        raise TypeError("a C++ plan runtime takes its ops from the C++ backend")

    def waiting_on(self, submitted) -> None:
        raise TypeError("a C++ plan runtime is told of waits by its Works")

    def step(self) -> None:
        self.native.step()

    def close(self, abort: bool = False) -> None:
        self.native.close(abort)
        if not abort:
            _shut_down(self.comms_by_channel)
