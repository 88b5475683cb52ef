"""A running plan read back as a choice of options, to price it on a new DAG (pure).

The replanning loop compares a search's result with the plan the job runs now.
The model's absolute iteration time of a live job is off by a factor the
model does not capture (on the emulated cluster: 8 ranks on 2 cores, whose
gloo threads wait for a core, measured as motifs 3–4× slower than calibrated),
but it is off by about the same factor for two plans of the same job in the
same cluster state. So the service needs the model's time of the *running*
plan, priced like the candidate: same traces, same (re-fitted) topology, same
scheduler. :func:`running_choice` inverts :func:`.plan_export.export_plan`
for the choice: per comm-op, the option whose motifs (in group positions) are
the ones the plan gives the op's key; ops the plan does not name run as the
library runs them (FIFO's choice). The scheduling order is not read back: the
plan's order is the critical-path schedule of its choice, so pricing the choice
with :data:`Policy.CRITICAL_PATH` recomputes it.
"""

from __future__ import annotations

from optimizer_service.plan.plan import Plan
from optimizer_service.syndicate.baselines import library_default
from optimizer_service.syndicate.plan_export import in_group, op_keys
from optimizer_service.syndicate.problem import Problem


def running_choice(problem: Problem, plan: Plan) -> list[int] | None:
    """The choice of options that ``plan`` makes on ``problem``'s DAG, or None
    when a planned op's motifs are none of its options (a plan made for another
    DAG or topology: it cannot be priced here)."""
    fallback = problem.greedy(library_default)
    planned = {op.key: op for op in plan.ops}
    choice = []
    for slot, key in enumerate(op_keys(problem)):
        found = None if key is None else planned.get(key)
        if found is None:
            choice.append(fallback[slot])
            continue
        matches = [k for k, option in enumerate(problem.options[slot]) if in_group(option.plan, key.group) == found.plan]
        if not matches:
            return None
        choice.append(matches[0])
    return choice
