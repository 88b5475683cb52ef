"""JSON forms of P² synthesis results: what ``p2 synth --json`` writes and what
the dashboard's P² explorer (:mod:`optimizer_service.service.explore`) serves.

The field names are part of the CLI contract: add fields, never rename them.
They live here, in the shell's service layer, so that the CLI and the service
build the same dicts (the CLI may import the service; the service never
imports the CLI).
"""

from __future__ import annotations

from typing import Any

from optimizer_service.p2.explain import Explanation
from optimizer_service.p2.hierarchy import SynthesisHierarchy
from optimizer_service.p2.planner import PlacementReport, RankedProgram, SynthesisReport, speedup
from optimizer_service.p2.semantics import DeviceState
from optimizer_service.plan.lowered import LoweredStep


def hierarchy_to_list(hierarchy: SynthesisHierarchy) -> list[dict[str, Any]]:
    """The synthesis hierarchy's levels (P² §3.4), root first: ``[{name, cardinality}]``."""
    return [{"name": level.name, "cardinality": level.cardinality} for level in hierarchy.levels]


def step_to_dict(step: LoweredStep, seconds: float) -> dict[str, Any]:
    """One lowered step (P² Figure 6): its collective, device groups, input fraction and predicted time."""
    return {"collective": step.collective.value, "groups": [list(g) for g in step.groups],
            "input_fraction": str(step.input_fraction), "predicted_seconds": seconds}


def program_to_dict(placement: PlacementReport, ranked: RankedProgram) -> dict[str, Any]:
    """A ranked program: text form, size, predicted time (P² §5), speed-up over the placement's flat AllReduce."""
    return {"text": str(ranked.program), "size": ranked.program.size,
            "predicted_seconds": ranked.predicted_seconds,
            "speedup": speedup(placement.allreduce_seconds, ranked.predicted_seconds),
            "steps": [step_to_dict(s, t) for s, t in zip(ranked.lowered.steps, ranked.step_seconds)]}


def best_to_dict(report: SynthesisReport) -> dict[str, Any] | None:
    """The fastest (placement, program) overall, or None when there is nothing to reduce."""
    best = report.best
    if best is None:
        return None
    placement, program = best
    return {"matrix": placement.matrix.to_lists(), "program": str(program.program),
            "predicted_seconds": program.predicted_seconds,
            "speedup": speedup(placement.allreduce_seconds, program.predicted_seconds)}


def report_args(report: SynthesisReport) -> dict[str, Any]:
    """The request a report answers and how long synthesis and simulation took."""
    return {
        "topology": report.topology.name,
        "hierarchy": list(report.topology.hierarchy),
        "axes": list(report.axes),
        "reduce": list(report.reduce),
        "bytes": report.nbytes,
        "algorithm": report.algorithm.value,
        "max_size": report.max_size,
        "synthesis_seconds": report.synthesis_seconds,
        "simulation_seconds": report.simulation_seconds,
    }


def report_to_dict(report: SynthesisReport) -> dict[str, Any]:
    """Every placement (P² §3.1) with every program, in the planner's order (``p2 synth --json``)."""
    placements = [{
        "matrix": p.matrix.to_lists(),
        "synthesis_hierarchy": hierarchy_to_list(p.hierarchy),
        "allreduce_seconds": p.allreduce_seconds,
        "speedup": p.speedup,
        "programs": [program_to_dict(p, r) for r in p.programs],
    } for p in report.placements]
    data = dict(report_args(report), placements=placements)
    best = best_to_dict(report)
    if best is not None:
        data["best"] = best
    return data


def states_to_list(states: tuple[DeviceState, ...], max_states: int | None, max_chars: int | None) -> list[str]:
    """Device states' text forms (P² §3.2): the first ``max_states`` devices, each
    cut to ``max_chars`` characters (with ``…``); None keeps everything."""
    shown = states if max_states is None else states[:max_states]
    texts = [str(s) for s in shown]
    if max_chars is None:
        return texts
    return [t if len(t) <= max_chars else t[:max_chars - 1] + "…" for t in texts]


def explanation_to_dict(e: Explanation, max_states: int | None = None,
                        max_chars: int | None = None) -> dict[str, Any]:
    """One program explained on one placement: its steps with the device states
    after each. With ``max_states`` the states are cut to that many devices and
    ``states_omitted`` says how many were left out."""
    steps = []
    for s in e.steps:
        step = dict(step_to_dict(s.lowered, s.predicted_seconds), reduction=str(s.reduction),
                    states_after=states_to_list(s.states_after, max_states, max_chars))
        if max_states is not None:
            step.update(changes_state=s.changes_state,
                        states_omitted=max(0, len(s.states_after) - max_states))
        steps.append(step)
    return {
        "matrix": e.matrix.to_lists(),
        "synthesis_hierarchy": hierarchy_to_list(e.hierarchy),
        "valid": e.valid,
        "error": e.error,
        "reaches_final_state": e.reaches_final,
        "allreduce_seconds": e.allreduce_seconds,
        "predicted_seconds": e.predicted_seconds,
        "initial_states": states_to_list(e.initial_states, max_states, max_chars),
        "steps": steps,
    }


def explanations_to_dict(explanations: list[Explanation], args: dict[str, Any]) -> dict[str, Any]:
    """``p2 synth --explain --json``: the request's ``args`` plus one explanation per placement."""
    return dict(args, placements=[explanation_to_dict(e) for e in explanations])
