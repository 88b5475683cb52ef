"""What ``p2 reshard`` prints and writes: the unit tasks, one row per
algorithm, the JSON document, and a Gantt chart of host lanes per algorithm."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from optimizer_service.resharding.planner import ReshardPlan
from optimizer_service.resharding.unit_tasks import UnitTask, groups_text
from optimizer_service.units import human_bytes, human_seconds

#: The unit-task table shows at most this many rows (``--json`` has them all).
TABLE_ROWS = 32


def header(plan: ReshardPlan, topology_note: str) -> str:
    request = plan.request
    return "\n".join([
        f"reshard {'x'.join(map(str, request.shape))} ({request.element_bytes}-byte elements, "
        f"{human_bytes(request.nbytes)}), strategy {request.strategy}, topology {plan.topology}{topology_note}",
        f"  source       {request.src}",
        f"  destination  {request.dst}",
    ])


def unit_task_table(tasks: Sequence[UnitTask], limit: int = TABLE_ROWS) -> str:
    lines = [f"unit tasks ({len(tasks)}):", f"  {'#':>4}  {'slice':<28} {'bytes':>10}  {'held by':<24} needed by"]
    for task in tasks[:limit]:
        lines.append(f"  {task.index:>4}  {str(task.box):<28} {human_bytes(task.nbytes):>10}  "
                     f"{groups_text(task.source_hosts, task.source_groups):<24} "
                     f"{groups_text(task.destination_hosts, task.destination_groups)}")
    if len(tasks) > limit:
        lines.append(f"  ... {len(tasks) - limit} more (--json lists them all)")
    return "\n".join(lines)


def _order_text(plan: ReshardPlan, limit: int = 16) -> str:
    steps = [f"{i}<{plan.senders[i]}" for i in plan.order[:limit]]
    more = f" ... (+{len(plan.order) - limit})" if len(plan.order) > limit else ""
    return " ".join(steps) + more


def algorithm_table(plans: Sequence[ReshardPlan]) -> str:
    bound = plans[0].bound
    lines = [f"lower bound: {bound}",
             f"{'algorithm':<10} {'predicted':>11} {'vs bound':>9}  {'search':<22} order (unit task<sender rank)"]
    for plan in plans:
        ratio = plan.ratio_to_lower_bound
        search = plan.search
        searched = (f"{search.nodes} nodes, {'optimal' if search.optimal else search.stopped_by}"
                    if search.nodes or search.optimal else "-")
        lines.append(f"{plan.algorithm:<10} {human_seconds(plan.predicted_seconds):>11} "
                     f"{'-' if ratio is None else f'{ratio:.3f}x':>9}  {searched:<22} {_order_text(plan)}")
    return "\n".join(lines)


def measured_table(plans: Sequence[ReshardPlan], measured: Mapping[str, float]) -> str:
    """Measured (median, slowest rank) against predicted and the lower bound."""
    bound = plans[0].lower_bound_seconds
    lines = [f"{'algorithm':<10} {'measured':>11} {'vs bound':>9} {'vs predicted':>13}"]
    for plan in plans:
        seconds = measured[plan.algorithm]
        vs_bound = f"{seconds / bound:.3f}x" if bound else "-"
        lines.append(f"{plan.algorithm:<10} {human_seconds(seconds):>11} {vs_bound:>9} "
                     f"{seconds / plan.predicted_seconds if plan.predicted_seconds else 0:>12.3f}x")
    return "\n".join(lines)


def unit_task_dict(task: UnitTask) -> dict:
    return {"index": task.index, "box": str(task.box), "shape": list(task.box.shape), "bytes": task.nbytes,
            "source_hosts": list(task.source_hosts), "sources": [list(g) for g in task.source_groups],
            "destination_hosts": list(task.destination_hosts),
            "destinations": [list(g) for g in task.destination_groups]}


def plan_dict(plan: ReshardPlan, measured_seconds: float | None = None) -> dict:
    data = {"name": plan.algorithm, "predicted_seconds": plan.predicted_seconds,
            "ratio_to_lower_bound": plan.ratio_to_lower_bound,
            "senders": list(plan.senders), "sender_hosts": list(plan.sender_hosts), "order": list(plan.order),
            "partitions": list(plan.partitions), "starts": list(plan.starts), "finishes": list(plan.finishes),
            "search": {"nodes": plan.search.nodes, "optimal": plan.search.optimal,
                       "stopped_by": plan.search.stopped_by},
            "program": str(plan.program)}
    if measured_seconds is not None:
        data["measured_seconds"] = measured_seconds
    return data


def document(plans: Sequence[ReshardPlan], *, topology_yaml: str, seed: int, budget: float,
             measured: Mapping[str, float] | None = None) -> dict:
    """The ``--json`` document; ``measured`` (algorithm → seconds) adds ``measured_seconds``."""
    first = plans[0]
    request = first.request
    return {
        "shape": list(request.shape),
        "element_bytes": request.element_bytes,
        "src": request.src,
        "dst": request.dst,
        "strategy": str(request.strategy),
        "topology": first.topology,
        "topology_yaml": topology_yaml,
        "seed": seed,
        "budget_seconds": budget,
        "unit_tasks": [unit_task_dict(t) for t in first.unit_tasks],
        "lower_bound_seconds": first.lower_bound_seconds,
        "lower_bound": str(first.bound),
        "algorithms": [plan_dict(p, (measured or {}).get(p.algorithm)) for p in plans],
    }


def gantt(plans: Sequence[ReshardPlan], path: Path) -> None:
    """One panel per algorithm: a lane per host side (h0 send, h2 recv, ...), a bar per task."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lanes = sorted({(bar.role != "send", bar.host) for plan in plans for bar in plan.lanes()})
    names = [f"h{host} {'recv' if recv else 'send'}" for recv, host in lanes]
    palette = plt.get_cmap("tab20")
    seconds = max(max(p.predicted_seconds for p in plans), plans[0].lower_bound_seconds) or 1.0
    unit, scale = next(((u, k) for u, k in (("s", 1.0), ("ms", 1e3)) if seconds * k >= 1.0), ("us", 1e6))
    horizon = seconds * scale
    fig, axes = plt.subplots(len(plans), 1, figsize=(12, 1.0 + 0.35 * len(lanes) * len(plans)), sharex=True,
                             squeeze=False)
    for ax, plan in zip(axes[:, 0], plans):
        for bar in plan.lanes():
            row = lanes.index((bar.role != "send", bar.host))
            width = (bar.finish - bar.start) * scale
            ax.barh(row, width, left=bar.start * scale, height=0.8, color=palette(bar.task % 20),
                    edgecolor="white", linewidth=0.3)
            if len(plan.unit_tasks) <= 64 and width > horizon / 60:
                ax.text(bar.start * scale + width / 2, row, str(bar.task), ha="center", va="center", fontsize=6)
        if plan.lower_bound_seconds > 0:
            ax.axvline(plan.lower_bound_seconds * scale, color="black", linestyle="--", linewidth=0.8)
        ax.set_yticks(range(len(names)), names, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlim(0, horizon * 1.02)
        ratio = plan.ratio_to_lower_bound
        ax.set_title(f"{plan.algorithm}: {human_seconds(plan.predicted_seconds)}"
                     + (f" ({ratio:.2f}x the lower bound, dashed)" if ratio is not None else ""),
                     fontsize=9, loc="left")
    axes[-1, 0].set_xlabel(f"{unit} (bars: unit tasks, numbered)")
    request = plans[0].request
    fig.suptitle(f"reshard {'x'.join(map(str, request.shape))} {request.src_spec} -> {request.dst_spec} "
                 f"({request.strategy}) on {plans[0].topology}", fontsize=10, x=0.01, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)
