"""What ``p2 pipeline`` prints and writes: each schedule's grid and numbers,
the comparison table against 1F1B, the JSON document, and a Gantt chart in
the manner of the paper's Figure 4 (rows are stages, bars are labelled with
micro-batch numbers; one lane per communication channel)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from optimizer_service.plan.pipeline import ActionKind, PipelineSchedule
from optimizer_service.resharding.pipeline_costs import PipelineCosts
from optimizer_service.resharding.pipeline_sim import PipelineTimeline

MIB = 1 << 20
REFERENCE = "1f1b"


@dataclass(frozen=True)
class SimulatedSchedule:
    schedule: PipelineSchedule
    timeline: PipelineTimeline
    weight_delays: tuple[int, ...] | None = None     # eager-1f1b-wd: each stage's W delay (actions)

    @property
    def name(self) -> str:
        return self.schedule.name


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


LINK_WORDS = {"edge": "a channel per directed edge", "host": "each stage's sends share its egress, its receives "
               "its ingress"}


def describe(costs: PipelineCosts, microbatches: int, overlap: bool, links: str = "edge") -> str:
    first = costs.stages[0]
    uniform = all(s == first for s in costs.stages)
    compute = (f"F {_ms(first.forward)}, B {_ms(first.backward)} (I {_ms(first.backward_input)} + W "
               f"{_ms(first.backward_weight)}), activation {first.activation_bytes / MIB:g} MiB per micro-batch"
               if uniform else "per-stage costs")
    edges = ", ".join(f"{e.from_stage}>{e.to_stage} {_ms(e.forward_seconds)}/{_ms(e.backward_seconds)}"
                      for e in costs.all_edges()) or "none"
    mode = "communication overlaps compute" if overlap else "sends hold the sending stage (no overlap)"
    return (f"{costs.name} profile, {costs.stage_count} stages x {microbatches} micro-batches; {compute}\n"
            f"edges (forward/backward): {edges}; {mode}; links: {links} ({LINK_WORDS[links]})")


def reference_seconds(results: list[SimulatedSchedule]) -> float | None:
    return next((r.timeline.iteration_seconds for r in results if r.name == REFERENCE), None)


def report(costs: PipelineCosts, results: list[SimulatedSchedule], microbatches: int, overlap: bool,
           links: str = "edge") -> str:
    lines = [describe(costs, microbatches, overlap, links), ""]
    for r in results:
        t = r.timeline
        lines.append(str(r.schedule))
        delays = f", weight delays {list(r.weight_delays)}" if r.weight_delays is not None else ""
        lines.append(f"  iteration {_ms(t.iteration_seconds)}, bubble {t.bubble_fraction * 100:.1f}%, peak activation "
                     f"per stage {[round(b / MIB, 1) for b in t.peak_activation_bytes]} MiB{delays}")
        lines.append("")
    if len(results) > 1:
        lines.append(table(results))
    return "\n".join(lines).rstrip()


def table(results: list[SimulatedSchedule]) -> str:
    reference = reference_seconds(results)
    lines = [f"{'schedule':<15} {'iteration':>13} {'vs 1f1b':>8} {'bubble':>7}  peak activation per stage (MiB)"]
    for r in results:
        t = r.timeline
        ratio = f"{t.iteration_seconds / reference:.3f}" if reference else "-"
        lines.append(f"{r.name:<15} {_ms(t.iteration_seconds):>13} {ratio:>8} {t.bubble_fraction * 100:>6.1f}%  "
                     f"{' '.join(f'{b / MIB:g}' for b in t.peak_activation_bytes)}")
    lines.append("vs 1f1b: iteration time / 1F1B's (below 1 is faster)")
    return "\n".join(lines)


def document(costs: PipelineCosts, results: list[SimulatedSchedule], microbatches: int, overlap: bool,
             links: str = "edge") -> dict:
    reference = reference_seconds(results)
    return {
        "stages": costs.stage_count,
        "microbatches": microbatches,
        "profile": costs.name,
        "overlap": overlap,
        "links": links,
        "costs": str(costs),
        "edges": [{"from_stage": e.from_stage, "to_stage": e.to_stage, "forward_seconds": e.forward_seconds,
                   "backward_seconds": e.backward_seconds} for e in costs.all_edges()],
        "schedules": [{
            "name": r.name,
            "text": str(r.schedule),
            "iteration_seconds": r.timeline.iteration_seconds,
            "ratio_to_1f1b": r.timeline.iteration_seconds / reference if reference else None,
            "bubble_fraction": r.timeline.bubble_fraction,
            "idle_seconds_per_stage": list(r.timeline.idle_seconds),
            "peak_activation_bytes_per_stage": list(r.timeline.peak_activation_bytes),
            "peak_inflight_microbatches_per_stage": list(r.timeline.peak_inflight_microbatches),
            "weight_delays": list(r.weight_delays) if r.weight_delays is not None else None,
            "actions": [{"action": str(a.action), "start": a.start, "end": a.end}
                        for stage in r.timeline.actions for a in stage],
            "transfers": [{"from_stage": x.from_stage, "to_stage": x.to_stage, "direction": str(x.direction),
                           "microbatch": x.microbatch, "start": x.start, "end": x.end}
                          for x in r.timeline.transfers],
        } for r in results],
    }


COLOURS = {ActionKind.FORWARD: "#4c78a8", ActionKind.BACKWARD: "#54a24b", ActionKind.BACKWARD_INPUT: "#88d27a",
           ActionKind.BACKWARD_WEIGHT: "#eeca3b"}


def gantt(costs: PipelineCosts, results: list[SimulatedSchedule], path: Path) -> None:
    """One panel per schedule: a row per stage and a lane per directed edge."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lanes = [(e.from_stage, e.to_stage) for e in costs.all_edges()]
    lanes += [(b, a) for a, b in lanes]
    rows = [f"stage {s}" for s in range(costs.stage_count)] + [f"{a}>{b} {'fwd' if a < b else 'bwd'}"
                                                                 for a, b in lanes]
    horizon = max(r.timeline.iteration_seconds for r in results) * 1e3 or 1.0
    fig, axes = plt.subplots(len(results), 1, figsize=(13, 0.8 + 0.32 * len(rows) * len(results)), sharex=True,
                             squeeze=False)
    for ax, r in zip(axes[:, 0], results):
        t = r.timeline
        for stage in t.actions:
            for a in stage:
                _bar(ax, a.action.stage, a.start, a.end, COLOURS[a.action.kind], str(a.action.microbatch), horizon)
        for x in t.transfers:
            if x.end > x.start:
                row = costs.stage_count + lanes.index((x.from_stage, x.to_stage))
                colour = COLOURS[ActionKind.FORWARD if x.direction is ActionKind.FORWARD else ActionKind.BACKWARD]
                _bar(ax, row, x.start, x.end, colour, str(x.microbatch), horizon, alpha=0.55)
        ax.set_yticks(range(len(rows)), rows, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlim(0, horizon)
        ax.set_title(f"{r.name}: {t.iteration_seconds * 1e3:.2f} ms per iteration, bubble "
                     f"{t.bubble_fraction * 100:.1f}%", fontsize=9, loc="left")
    axes[-1, 0].set_xlabel("ms")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLOURS.values()]
    fig.legend(handles, ["F", "B", "I (input grad)", "W (weight grad)"], loc="upper right", fontsize=7, ncol=4)
    fig.suptitle(f"{costs.name}: {costs.stage_count} stages, links {results[0].timeline.links}", fontsize=10,
                 x=0.01, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _bar(ax, row: int, start: float, end: float, colour: str, label: str, horizon: float,
         alpha: float = 1.0) -> None:
    width = (end - start) * 1e3
    ax.barh(row, width, left=start * 1e3, height=0.8, color=colour, alpha=alpha, edgecolor="white", linewidth=0.4)
    if width > horizon / 120:
        ax.text(start * 1e3 + width / 2, row, label, ha="center", va="center", fontsize=6)
