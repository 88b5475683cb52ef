"""The joint optimizer's result as the plan the enforcer installs (§4.3's
"optimizer plan": the execution plan and the scheduling order).

The search schedules two unrolled iterations; the plan describes one
iteration, taken from the second (the steady state, where ops moved across
the boundary already sit where they will always run). For every comm-op of
that iteration whose kind a plan can carry (:data:`optimizer_service.plan.op_plan.KINDS`)
and that the enforcer can hand to a plan (a traced op's ``passthrough``
reason is empty), whatever its dtype (issue 32), it gives

* the key: the op's position among its group's ops in the iteration, its
  kind, its buffer's bytes (its elements in their own size, the buffer model
  of :mod:`optimizer_service.plan.op_plan`), its group, and a traced op's
  dtype (a workload's ops name none: their motifs count fp32 elements);
* the motifs of the chosen option, ranks as group positions;
* each motif's sequence number: the schedule's numbers renumbered densely
  within the iteration, so motifs that start together share one.

Ops of a workload stand for every group that runs them at once (a
tensor-parallel all-reduce of group 0 stands for every node's): the plan
names the representative group, and other groups' ops pass through. A traced
job's parallel subgroups are nodes of their own
(:mod:`optimizer_service.syndicate.trace_dag`), so each gets its key.
"""

from __future__ import annotations

from dataclasses import replace

from optimizer_service.plan.collective import Collective
from optimizer_service.plan.motif import Composition, Motif, motifs_of, rewrite
from optimizer_service.plan.op_plan import KINDS, OpKey, OpPlan
from optimizer_service.plan.plan import Plan
from optimizer_service.syndicate.baselines import SystemResult
from optimizer_service.syndicate.problem import Problem


def buffer_bytes(op: Motif) -> int:
    """The op's buffer: its elements (every member's part for gathers and
    reduce-scatters), and for an all-to-all one block per member, in bytes."""
    return op.nbytes * (len(op.ranks) if op.kind is Collective.ALL_TO_ALL else 1)


def op_keys(problem: Problem) -> list[OpKey | None]:
    """Per comm-op slot of ``problem``, the key a plan gives its op: its position
    among its group's ops in the iteration, its kind, its buffer, its group (in
    the traced order), a broadcast's root position and its dtype; None for a
    kind no plan carries (a Reduce) and for an op the enforcer runs as traced
    (its ``passthrough`` reason): either still takes its position."""
    group_seq: dict[tuple[int, ...], int] = {}
    keys: list[OpKey | None] = []
    for node_index in problem.comm_nodes:
        node = problem.dag.nodes[node_index]
        op, group, root = node.comm, node.comm.ranks, 0
        if op.kind is Collective.BROADCAST and node.root:     # its ranks start at the root: the group's order back
            root = node.root
            group = group[-root:] + group[:-root]
        seq = group_seq.get(group, 0)
        group_seq[group] = seq + 1
        kind = op.kind.name.lower()         # ALL_REDUCE -> "all_reduce"
        plannable = kind in KINDS and not node.passthrough
        keys.append(OpKey(seq, kind, buffer_bytes(op), group, root, node.dtype) if plannable else None)
    return keys


def in_group(plan: Composition, group: tuple[int, ...]) -> Composition:
    """``plan`` (motifs over global ranks) with its ranks as positions in ``group``, as a plan gives them."""
    position = {rank: k for k, rank in enumerate(group)}
    return rewrite(plan, lambda m: _positions(m, position))


def export_plan(problem: Problem, result: SystemResult, version: int = 1) -> Plan:
    """``result``'s choice and schedule as the plan the enforcer installs (module docstring)."""
    evaluation = result.evaluation
    last = problem.iterations - 1
    per_iteration = len(problem.dag.nodes)
    numbers = evaluation.graph.sequence(evaluation.start, evaluation.order)
    mine = {i: n for i, n in numbers.items() if evaluation.task_node[i] // per_iteration == last}
    dense = {n: k for k, n in enumerate(sorted(set(mine.values())))}
    tasks_of: dict[int, list[int]] = {}
    for i in sorted(mine):
        tasks_of.setdefault(evaluation.task_node[i], []).append(i)
    ops = []
    for slot, (node_index, key) in enumerate(zip(problem.comm_nodes, op_keys(problem))):
        if key is None:
            continue
        option = problem.options[slot][result.choice[slot]]
        local = in_group(option.plan, key.group)
        position = {rank: k for k, rank in enumerate(key.group)}
        number_of: dict[Motif, int] = {}
        for task in tasks_of.get(last * per_iteration + node_index, []):
            for motif in evaluation.task_motifs[task]:
                number_of[_positions(motif, position)] = dense[mine[task]]
        order = [number_of[m] for m in motifs_of(local)]
        ops.append(OpPlan.of(key, local, order=order))
    channels = {c: None for c in problem.cost.topology.channels}
    return Plan(version=version, world_size=problem.cost.topology.device_count, channels=channels, ops=tuple(ops),
                topology=problem.cost.topology.name, predicted_iteration_seconds=evaluation.seconds)


def _positions(motif: Motif, position: dict[int, int]) -> Motif:
    return replace(motif, ranks=tuple(position[r] for r in motif.ranks))
