"""Text form of ``p2 synth`` results. The JSON form (field names are part of the
CLI contract) is built by :mod:`optimizer_service.service.synth_json`, shared
with the dashboard's P² explorer."""

from __future__ import annotations

from optimizer_service.p2.explain import Explanation
from optimizer_service.p2.planner import SynthesisReport, speedup
from optimizer_service.units import format_bytes, human_seconds

MAX_STATES_SHOWN = 16


def _table(rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    return lines


def render_report(report: SynthesisReport, top: int) -> str:
    topo = report.topology
    programs = sum(len(p.programs) for p in report.placements)
    lines = [
        f"{topo.name} [{' '.join(map(str, topo.hierarchy))}]: axes [{' '.join(map(str, report.axes))}], "
        f"reduce [{' '.join(map(str, report.reduce))}], {format_bytes(report.nbytes)} per device, "
        f"{report.algorithm} algorithm, program size <= {report.max_size}",
        f"{len(report.placements)} placements, {programs} programs; synthesis "
        f"{report.synthesis_seconds * 1e3:.1f} ms, simulation {report.simulation_seconds * 1e3:.1f} ms",
        "",
    ]
    rows = [["#", "matrix", "synthesis hierarchy", "programs", "AllReduce", "best", "speedup", "best program"]]
    for i, p in enumerate(report.placements, start=1):
        best = p.best
        rows.append([str(i), str(p.matrix), str(p.hierarchy), str(len(p.programs)),
                     human_seconds(p.allreduce_seconds),
                     human_seconds(best.predicted_seconds) if best else "-",
                     f"{p.speedup:.2f}x", str(best.program) if best else "(nothing to reduce)"])
    lines += _table(rows, right={0, 3, 4, 5, 6})
    if top > 1:
        for i, p in enumerate(report.placements, start=1):
            lines += ["", f"placement {i} {p.matrix}: top {min(top, len(p.programs))} of {len(p.programs)}"]
            for rank, r in enumerate(p.programs[:top], start=1):
                lines.append(f"  {rank:>3}. {human_seconds(r.predicted_seconds):>9}  "
                             f"{speedup(p.allreduce_seconds, r.predicted_seconds):5.2f}x  {r.program}")
    best = report.best
    lines.append("")
    if best is None:
        lines.append("nothing to reduce: the reduction axes have size 1")
    else:
        placement, program = best
        lines.append(f"best: {placement.matrix} with \"{program.program}\" — "
                     f"{human_seconds(program.predicted_seconds)}, "
                     f"{speedup(placement.allreduce_seconds, program.predicted_seconds):.2f}x over its AllReduce")
        reducing = [p.allreduce_seconds for p in report.placements if p.allreduce_seconds > 0]
        if len(reducing) > 1:
            lines.append(f"placement matters: a single AllReduce takes {human_seconds(min(reducing))} to "
                         f"{human_seconds(max(reducing))} depending on the matrix "
                         f"({max(reducing) / min(reducing):.1f}x)")
    return "\n".join(lines)


def _states(states, k: int) -> list[str]:
    shown = [f"      d{d}: {s}" for d, s in enumerate(states[:MAX_STATES_SHOWN])]
    if k > MAX_STATES_SHOWN:
        shown.append(f"      ... {k - MAX_STATES_SHOWN} more devices")
    return shown


def render_explanations(explanations: list[Explanation], program: str) -> str:
    lines = [f"program: {program}",
             "device states: ROWS:DEVICES — the chunks a device holds and whose data each sums ('-' = empty)"]
    for e in explanations:
        k = e.hierarchy.device_count
        lines += ["", f"placement {e.matrix}, synthesis hierarchy {e.hierarchy} ({k} devices per reduction group)"]
        lines.append("   initial:")
        lines += _states(e.initial_states, k)
        for number, s in enumerate(e.steps, start=1):
            groups = " ".join("{" + ",".join(map(str, g)) + "}" for g in s.lowered.groups[:8])
            more = f" ... ({len(s.lowered.groups)} groups)" if len(s.lowered.groups) > 8 else ""
            lines.append(f"  {number}. {s.reduction}  [{human_seconds(s.predicted_seconds)}, input "
                         f"{s.lowered.input_fraction} of the buffer]{'' if s.changes_state else '  (changes nothing)'}")
            lines.append(f"     lowered: {s.lowered.collective} {groups}{more}")
            lines += _states(s.states_after, k)
        if e.error:
            lines.append(f"  INVALID: {e.error}")
        elif e.reaches_final:
            lines.append(f"  valid: every device ends with the sum over its reduction group; predicted "
                         f"{human_seconds(e.predicted_seconds)} vs AllReduce {human_seconds(e.allreduce_seconds)}")
        else:
            lines.append("  incomplete: the steps are valid but do not reach the AllReduce result on every device")
    return "\n".join(lines)
