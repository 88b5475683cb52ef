"""What ``p2 optimize`` prints and writes: the comparison table, the plan's
predicted time beside the lower bound on the job's iteration time
(:mod:`optimizer_service.syndicate.bound`, issue 32 item 6), the JSON document,
and a Gantt chart of each system's iteration (Syndicate Figure 15)."""

from __future__ import annotations

import json
from pathlib import Path

from optimizer_service.plan.plan import Plan
from optimizer_service.syndicate.baselines import SystemResult
from optimizer_service.syndicate.bound import Bound
from optimizer_service.syndicate.problem import Problem
from optimizer_service.syndicate.scheduler import COMPUTE, channel_and_lane, stream_of


def baseline(results: list[SystemResult]) -> SystemResult:
    """What speedups are relative to: BS+ (the paper's reference), else the first system."""
    return next((r for r in results if r.name == "BS+"), results[0])


def legend(problem: Problem) -> str:
    return (f"iteration: the {problem.iterations}-iteration makespan / {problem.iterations} (what the search "
            f"minimises); steady state: per iteration once a job runs (what Syndicate measures)")


def table(problem: Problem, results: list[SystemResult]) -> str:
    reference = baseline(results)
    lines = [f"{'system':<10} {'iteration':>11} {'vs BS+':>7} {'compute idle':>13} {'steady state':>13} "
             f"{'vs BS+':>7}  search"]
    for r in results:
        search = ""
        if r.search is not None:
            s = r.search
            search = f"{s.evaluations} evaluations in {s.elapsed:.1f} s, {s.accepted} accepted ({s.stopped_by})"
        lines.append(f"{r.name:<10} {r.seconds * 1e3:>8.3f} ms {reference.seconds / r.seconds:>6.2f}x "
                     f"{r.evaluation.compute_idle_fraction * 100:>12.1f}% {r.steady_seconds * 1e3:>10.3f} ms "
                     f"{reference.steady_seconds / r.steady_seconds:>6.2f}x  {search}")
    return "\n".join(lines)


def bound_line(results: list[SystemResult], bound: Bound) -> str:
    """Syndicate's predicted iteration (what its plan carries) beside the lower bound, and their ratio."""
    chosen = results[-1]
    ratio = f"{chosen.seconds / bound.seconds:.2f}x" if bound.seconds > 0 else "-"
    return f"{chosen.name} predicts {chosen.seconds * 1e3:.3f} ms per iteration, {ratio} the lower bound: {bound}"


def chosen_options(problem: Problem, result: SystemResult) -> list[dict]:
    return [{"op": problem.dag.nodes[node].name, "option": problem.options[slot][result.choice[slot]].name}
            for slot, node in enumerate(problem.comm_nodes)]


def document(problem: Problem, results: list[SystemResult], plan: Plan, bound: Bound, topology_name: str,
             seed: int, budget: float) -> dict:
    """The JSON of ``p2 optimize``: every system, the search, the plan, and the lower bound on the
    iteration time (``bound_iteration_seconds``, and ``bound``: its terms and what binds)."""
    reference = baseline(results)
    chosen = results[-1]
    search = chosen.search
    return {
        "workload": problem.dag.name,
        "description": problem.dag.description,
        "topology": topology_name,
        "iterations_unrolled": problem.iterations,
        "seed": seed,
        "budget_seconds": budget,
        "systems": [{"name": r.name, "iteration_seconds": r.seconds,
                     "compute_idle_fraction": r.evaluation.compute_idle_fraction,
                     "speedup_over_bs_plus": reference.seconds / r.seconds,
                     "steady_state_seconds": r.steady_seconds,
                     "steady_state_speedup_over_bs_plus": reference.steady_seconds / r.steady_seconds,
                     "policy": str(r.policy),
                     "framework_order": r.framework_order, "options": chosen_options(problem, r)}
                    for r in results],
        "search": {"evaluations": search.evaluations if search else 0,
                   "seconds": search.elapsed if search else 0.0,
                   "accepted": search.accepted if search else 0,
                   "stopped_by": search.stopped_by if search else None,
                   "start_iteration_seconds": search.start_seconds if search else None},
        "plan": plan_to_dict(plan),
        "bound_iteration_seconds": bound.seconds,
        "bound": bound.to_dict(),
    }


def plan_to_dict(plan: Plan) -> dict:
    return json.loads(plan.to_json())


def gantt(problem: Problem, results: list[SystemResult], path: Path) -> None:
    """One panel per system: every compute stream and every channel (each lane of it) over time."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    used = {c for r in results for c in r.evaluation.channel}
    streams = sorted((c for c in used if c < 0), reverse=True) or [COMPUTE]    # stream 0 first
    channels = sorted(c for c in used if c >= 0)
    resources = streams + channels
    rows = (["compute"] if len(streams) == 1 else [f"compute {stream_of(c)}" for c in streams]) + [
        f"ch{channel}" + (f" lane {lane}" if lane else "") for channel, lane in map(channel_and_lane, channels)]
    names = sorted(node.name for node in problem.dag.nodes)
    palette = plt.get_cmap("tab20")
    colour = {name: palette(k % 20) for k, name in enumerate(names)}
    per_iteration = len(problem.dag.nodes)
    horizon = max(r.evaluation.makespan for r in results)
    fig, axes = plt.subplots(len(results), 1, figsize=(13, 1.0 + 0.55 * len(rows) * len(results)), sharex=True,
                             squeeze=False)
    for ax, r in zip(axes[:, 0], results):
        e = r.evaluation
        for task, node in enumerate(e.task_node):
            if e.end[task] <= e.start[task]:
                continue
            row = resources.index(e.channel[task])
            name = problem.dag.nodes[node % per_iteration].name
            iteration = node // per_iteration
            ax.barh(row, (e.end[task] - e.start[task]) * 1e3, left=e.start[task] * 1e3, height=0.8,
                    color=colour[name], edgecolor="black" if iteration else "white", linewidth=0.3)
        ax.set_yticks(range(len(rows)), rows)
        ax.invert_yaxis()
        ax.set_xlim(0, horizon * 1e3)
        ax.set_title(f"{r.name}: {r.seconds * 1e3:.2f} ms per iteration, compute idle "
                     f"{e.compute_idle_fraction * 100:.1f}%", fontsize=9, loc="left")
    axes[-1, 0].set_xlabel("ms (two iterations; the second outlined in black)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour[n]) for n in names]
    fig.legend(handles, names, loc="upper right", fontsize=7, ncol=max(1, len(names) // 12 + 1))
    fig.suptitle(f"{problem.dag.name} on {problem.cost.topology.name}", fontsize=10, x=0.01, ha="left")
    fig.tight_layout(rect=(0, 0, 0.86, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)
