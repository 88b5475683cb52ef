"""The data behind the dashboard's Topology page and P² explorer (transport-agnostic).

* :func:`topology_view` describes a topology (P² §2: a hierarchy of levels and
  the links between them) as plain JSON-able values, with its YAML text.
* :func:`load` reads a preset name or YAML text typed into a form — never a
  file path: a web request must not make the service read its files.
* :func:`explore` is what ``p2 synth`` computes — placements (P² §3.1) ×
  synthesized reduction programs (§3.3–§3.5) ranked by the simulator (§5) —
  plus, for every shown program, its lowered steps (Figure 6) and the device
  states after each step (§3.2), as ``p2 synth --explain`` shows them.

Work is bounded before it starts by the planner's :class:`Limits` (the caller
passes ``Settings().limits()``); output by ``placements_limit``,
``programs_limit`` and caps on the device states and groups shown per step. Every bad
input is an :class:`InvalidInputError` with one readable line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from optimizer_service.catalog import load_topology, preset_names
from optimizer_service.errors import InvalidInputError, SearchBoundError
from optimizer_service.hardware.bounded_yaml import DEFAULT_LIMITS, preview
from optimizer_service.hardware.cost_model import Algorithm
from optimizer_service.hardware.topology import Topology
from optimizer_service.p2.explain import explain_program
from optimizer_service.p2.planner import DEFAULT_BYTES, Limits, PlacementReport, Planner, RankedProgram, speedup
from optimizer_service.p2.semantics import DeviceState, initial_context
from optimizer_service.p2.synthesis import DEFAULT_MAX_SIZE
from optimizer_service.service.planning import short_error
from optimizer_service.service.requests import RequestError
from optimizer_service.service.synth_json import (
    best_to_dict,
    explanation_to_dict,
    hierarchy_to_list,
    report_args,
    states_to_list,
)

#: Largest topology YAML a form may send (the presets are under 3 KiB): the YAML loader's own bound.
MAX_YAML_CHARS = DEFAULT_LIMITS.max_chars
#: Bounds on what one explorer request may ask to see.
MAX_PLACEMENTS_SHOWN = 32
MAX_PROGRAMS_SHOWN = 16
#: Device states shown per step (the first devices of the reduction group), and characters per state.
STATES_SHOWN = 16
STATE_CHARS = 200
#: Device groups listed per lowered step (a step over a large system has one group per reduction group).
GROUPS_SHOWN = 16
#: Longest integer list a form may send.
MAX_LIST_CHARS = 256

# The planner's bound errors end with the setting an operator may raise; a
# dashboard user is told first what to ask for less of.
_BOUND_TAIL = re.compile(r";\s*(?:lower --max-size or )?raise (P2_[A-Z_]+)\s*$")
_WHAT_TO_REDUCE = {
    "P2_MAX_DEVICES": "pick a smaller topology",
    "P2_MAX_PLACEMENTS": "use fewer parallelism axes",
    "P2_MAX_SYNTHESIS_DEVICES": "reduce over fewer or smaller axes",
    "P2_MAX_PROGRAM_SIZE": "lower the program size limit",
    "P2_MAX_SEARCH_STATES": "lower the program size limit or reduce over fewer axes",
}


# ---------------------------------------------------------------- topology page
def topology_choices() -> list[str]:
    """The preset topologies' names, sorted."""
    return preset_names()


def load(name_or_yaml: str) -> Topology:
    """A preset by name, or topology YAML text (P² §2). Never a file path.

    The size is checked before anything looks at the text, and the YAML is read
    by :func:`optimizer_service.hardware.bounded_yaml.load` (aliases, depth and
    node count bounded before anything is built); every refusal is one short
    line that quotes at most a short preview of the text.

    :func:`optimizer_service.service.planning.resolve_topology` does not fit
    here: it returns YAML rather than a value, takes only multi-line text for
    YAML and its errors speak of a job's ``P2_TOPOLOGY``.
    """
    if isinstance(name_or_yaml, str) and len(name_or_yaml) > MAX_YAML_CHARS:
        raise _refused(f"topology: {len(name_or_yaml)} characters, more than the {MAX_YAML_CHARS} allowed; give a "
                       "preset or a shorter topology YAML")
    if not isinstance(name_or_yaml, str) or not name_or_yaml.strip():
        raise _refused(f"topology: empty; give a preset ({', '.join(preset_names())}) or topology YAML")
    text = name_or_yaml.strip()
    if text in preset_names():
        return load_topology(text)
    if "\n" not in text and ":" not in text:
        raise _refused(f"unknown topology {preview(text)}: give a preset ({', '.join(preset_names())}) "
                       "or topology YAML (files are not read)")
    try:
        return Topology.from_yaml(name_or_yaml, source="topology YAML")
    except InvalidInputError as error:
        raise _refused(short_error(str(error))) from None


def _refused(message: str) -> RequestError:
    """A refusal of the form's ``topology`` field (the dashboard answers its ``field``); the line names it already."""
    error = RequestError("topology", message)
    error.args = (message,)
    return error


def topology_view(topology: Topology) -> dict[str, Any]:
    """The topology as JSON-able values: levels outermost first, every link with
    its numbers in SI units (bytes/s, seconds) and the YAML text (round-trips
    through :meth:`Topology.from_yaml`)."""
    return {
        "name": topology.name,
        "description": topology.description,
        "device_count": topology.device_count,
        "hierarchy": list(topology.hierarchy),
        "levels": [{"name": level.name, "cardinality": level.cardinality,
                    "devices_per_instance": topology.devices_per_instance(index)}
                   for index, level in enumerate(topology.levels)],
        "links": [{
            "name": link.name,
            "levels": list(link.levels),
            "bandwidth": link.bandwidth,
            "latency": link.latency,
            "shared_by": link.shared_by,
            "instances": topology.device_count // link.shared_by,
            "channel": link.channel,
            "incast": link.incast,
            "reduction": link.reduction,
            "compute_slowdown": link.compute_slowdown,
            "text": str(link),
        } for link in topology.links],
        "channels": list(topology.channels),
        "compute_slowdowns": {str(c): s for c, s in topology.compute_slowdowns().items()},
        "yaml": topology.to_yaml(),
    }


# ----------------------------------------------------------------- P² explorer
def parse_int_list(text: str, field: str) -> tuple[int, ...]:
    """``"4,2"``, ``"4 2"`` or ``"[4 2]"`` → ``(4, 2)``; whole numbers >= 0 only."""
    hint = "give whole numbers like 4,2"
    if not isinstance(text, str):
        raise InvalidInputError(f"{field}: {text!r} is not text; {hint}")
    if len(text) > MAX_LIST_CHARS:
        raise InvalidInputError(f"{field} has {len(text)} characters, more than {MAX_LIST_CHARS}")
    parts = [p for p in re.split(r"[,\s]+", text.strip().strip("[]()")) if p]
    if not parts:
        raise InvalidInputError(f"{field} is empty; {hint}")
    bad = [p for p in parts if not re.fullmatch(r"[0-9]{1,9}", p)]
    if bad:
        raise InvalidInputError(f"{field}: {bad[0]!r} is not a whole number; {hint}")
    return tuple(int(p) for p in parts)


def explore(topology: Topology, axes: Sequence[int], reduce: Sequence[int], *, limits: Limits,
            max_size: int = DEFAULT_MAX_SIZE, placements_limit: int = 8, programs_limit: int = 5,
            nbytes: int = DEFAULT_BYTES, algorithm: Algorithm | str = Algorithm.RING) -> dict[str, Any]:
    """Placements × programs ranked by predicted time (P² §3.5, §5), the best
    ``placements_limit`` placements with their best ``programs_limit`` programs,
    each program's lowered steps and the device states after each step (§3.2).

    Placements are ranked by their best program's predicted time (ties keep the
    planner's enumeration order); programs by predicted time, as the planner
    ranks them. ``placements_total`` / ``programs_total`` count what was
    synthesized, not only what is shown.
    """
    _check_shown("placements_limit", placements_limit, MAX_PLACEMENTS_SHOWN)
    _check_shown("programs_limit", programs_limit, MAX_PROGRAMS_SHOWN)
    if isinstance(algorithm, str):
        algorithm = Algorithm.parse(algorithm)
    try:
        report = Planner(limits).synthesize(topology, axes, reduce, nbytes, algorithm, max_size)
    except SearchBoundError as error:
        raise SearchBoundError(_what_to_reduce(error)) from None
    order = sorted(range(len(report.placements)), key=lambda i: (_best_seconds(report.placements[i]), i))
    placements = []
    for rank, index in enumerate(order[:placements_limit], start=1):
        placement = report.placements[index]
        programs = [_program_view(topology, report.reduce, placement, ranked, number, nbytes, algorithm)
                    for number, ranked in enumerate(placement.programs[:programs_limit], start=1)]
        k = placement.hierarchy.device_count
        placements.append({
            "rank": rank,
            "matrix": placement.matrix.to_lists(),
            "matrix_text": str(placement.matrix),
            "synthesis_hierarchy": hierarchy_to_list(placement.hierarchy),
            "synthesis_hierarchy_text": str(placement.hierarchy),
            "group_devices": k,
            "allreduce_seconds": placement.allreduce_seconds,
            "speedup": placement.speedup,
            "programs_total": len(placement.programs),
            "initial_states": states_to_list(tuple(DeviceState(s) for s in initial_context(k)),
                                             STATES_SHOWN, STATE_CHARS),
            "programs": programs,
        })
    return dict(report_args(report), placements_total=len(report.placements), placements=placements,
                best=best_to_dict(report),
                shown={"placements": placements_limit, "programs": programs_limit, "states_per_step": STATES_SHOWN})


def _program_view(topology: Topology, reduce: tuple[int, ...], placement: PlacementReport, ranked: RankedProgram,
                  rank: int, nbytes: int, algorithm: Algorithm) -> dict[str, Any]:
    """One ranked program with its explained steps (P² Figure 6 lowering, §3.2 states)."""
    [explanation] = explain_program(topology, placement.matrix.axes, reduce, ranked.program, nbytes, algorithm,
                                    placement.matrix)
    steps = explanation_to_dict(explanation, STATES_SHOWN, STATE_CHARS)["steps"]
    for step in steps:
        step["groups_total"] = len(step["groups"])
        del step["groups"][GROUPS_SHOWN:]
    return {"rank": rank, "text": str(ranked.program), "size": ranked.program.size,
            "predicted_seconds": ranked.predicted_seconds,
            "speedup": speedup(placement.allreduce_seconds, ranked.predicted_seconds),
            "steps": steps}


def _best_seconds(placement: PlacementReport) -> float:
    return placement.best.predicted_seconds if placement.best else placement.allreduce_seconds


def _check_shown(field: str, value: int, bound: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= bound:
        raise InvalidInputError(f"{field} {value!r} must be a whole number from 1 to {bound}")


def _what_to_reduce(error: SearchBoundError) -> str:
    message = short_error(str(error))
    match = _BOUND_TAIL.search(message)
    if match is None or match.group(1) not in _WHAT_TO_REDUCE:
        return message
    setting = match.group(1)
    return f"{message[:match.start()]}; {_WHAT_TO_REDUCE[setting]} (or an operator raises {setting})"
