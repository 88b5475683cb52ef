"""Text table and predicted-vs-measured plot of ``p2 bench reduce`` results."""

from __future__ import annotations

from pathlib import Path

from optimizer_service.errors import InvalidInputError
from optimizer_service.p2.placement import ParallelismMatrix
from optimizer_service.units import format_bytes, human_seconds


def _matrix(rows: list[list[int]]) -> str:
    return str(ParallelismMatrix(tuple(tuple(r) for r in rows)))


def render_bench(data: dict) -> str:
    lines = [f"cluster {data['cluster']}: axes {data['axes']} reduce {data['reduce']}, "
             f"{format_bytes(data['bytes'])} per rank, median of {data['repeat']} runs"
             + (f", {data['fabric']} fabric" if data["shaped"] else " (UNSHAPED loopback: nodes are not separated)")]
    drops = data.get("nic_drops")
    if drops is not None:
        lines.append(f"NIC queue drops: {drops['total']} in {drops['runs']} runs ({drops['per_run']:.2f} per run)"
                     + (", each a TCP retransmission the simulator does not model" if drops["total"] else ""))
    for entry in data["placements"]:
        flat = entry["flat"]
        lines.append("")
        lines.append(f"placement {_matrix(entry['matrix'])}"
                     f"{' (reduction crosses nodes)' if entry['crosses'] else ' (reduction within nodes)'}")
        lines.append(f"  {'candidate':<72} {'predicted':>10} {'measured':>10} {'speedup':>8}")
        lines.append(f"  {'flat AllReduce':<72} {human_seconds(flat['predicted_seconds']):>10} "
                     f"{human_seconds(flat['measured_seconds']):>10} {'1.00x':>8}")
        for program in entry["programs"]:
            text = program["text"] if len(program["text"]) <= 72 else program["text"][:69] + "..."
            lines.append(f"  {text:<72} {human_seconds(program['predicted_seconds']):>10} "
                         f"{human_seconds(program['measured_seconds']):>10} {program['speedup']:>7.2f}x")
    acc, summary = data["accuracy"], data["summary"]
    lines.append("")
    lines.append(f"simulator accuracy over {acc['candidates']} measured candidates "
                 f"({acc['placements']} placements): MAPE {acc['mape']:.1%}, Spearman {acc['spearman']:.3f}, "
                 f"top-1 {acc['top1']:.0%}, top-5 {acc['top5']:.0%} "
                 f"(within {acc['tolerance']:.0%} of the fastest: top-1 {acc['top1_tolerant']:.0%}, "
                 f"top-5 {acc['top5_tolerant']:.0%})")
    if summary["best_speedup_crossing"] is not None:
        lines.append(f"best program vs flat AllReduce where the reduction crosses nodes: "
                     f"{summary['best_speedup_crossing']:.2f}x at best, "
                     f"{summary['mean_best_speedup_crossing']:.2f}x on average over "
                     f"{summary['crossing_placements']} placement(s)")
    if len(data["placements"]) > 1:
        lines.append(f"placement spread (slowest / fastest): flat AllReduce {summary['flat_spread']:.1f}x, "
                     f"best candidate {summary['best_spread']:.1f}x")
    return "\n".join(lines)


def plot_predictions(data: dict, out: str) -> None:
    """Log-log scatter of predicted against measured seconds, one colour per placement."""
    path = Path(out)
    if not path.parent.exists():
        raise InvalidInputError(f"--plot {out}: folder {path.parent} does not exist")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 5.2))
    values = []
    for number, entry in enumerate(data["placements"]):
        colour = f"C{number % 10}"
        predicted = [p["predicted_seconds"] for p in entry["programs"]]
        measured = [p["measured_seconds"] for p in entry["programs"]]
        ax.scatter(predicted, measured, s=18, color=colour, label=_matrix(entry["matrix"]))
        ax.scatter([entry["flat"]["predicted_seconds"]], [entry["flat"]["measured_seconds"]], s=70,
                   marker="s", facecolors="none", edgecolors=colour)
        values += predicted + measured + [entry["flat"]["predicted_seconds"], entry["flat"]["measured_seconds"]]
    positive = [v for v in values if v > 0]
    if positive:
        low, high = min(positive) / 1.3, max(positive) * 1.3
        ax.plot([low, high], [low, high], color="grey", linewidth=0.8, linestyle="--", label="predicted = measured")
        ax.set_xscale("log")
        ax.set_yscale("log")
    acc = data["accuracy"]
    ax.set_xlabel("predicted seconds (simulator)")
    ax.set_ylabel("measured seconds (median)")
    ax.set_title(f"{data['cluster']}: axes {data['axes']} reduce {data['reduce']}, {format_bytes(data['bytes'])}\n"
                 f"MAPE {acc['mape']:.1%}, Spearman {acc['spearman']:.2f}, top-1 {acc['top1']:.0%}, "
                 f"top-5 {acc['top5']:.0%}  (squares: flat AllReduce)", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
