"""The dashboard's Topology page and P² explorer data: a topology as values and
YAML, presets or YAML text in (never a file), placements × programs ranked as
the planner ranks them with each step's device states, and one-line errors."""

from __future__ import annotations

import json

import pytest
import yaml

from optimizer_service.catalog import load_topology, preset_names
from optimizer_service.errors import InvalidInputError, SearchBoundError
from optimizer_service.hardware.topology import Topology
from optimizer_service.p2.planner import Limits, synthesize_placements
from optimizer_service.service.explore import (
    GROUPS_SHOWN,
    STATES_SHOWN,
    explore,
    load,
    parse_int_list,
    topology_choices,
    topology_view,
)
from optimizer_service.settings import Settings

#: Two nodes with a second, slower NIC on channel 1 that sums on the host and frees the GPU.
TWO_CHANNELS = """
name: two-nics
levels:
  - {name: node, cardinality: 2}
  - {name: gpu, cardinality: 4}
links:
  - {name: nvlink, levels: [gpu], bandwidth: 100GB/s, latency: 2us}
  - {name: nic, levels: [node], bandwidth: 10GB/s, latency: 20us, shared_by: 4, incast: 0.1}
  - {name: nic2, levels: [node], bandwidth: 5GB/s, latency: 40us, shared_by: 4, channel: 1,
     reduction: 2GB/s, compute_slowdown: 0.25}
"""


def assert_one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert message and "\n" not in message
    return message


# ------------------------------------------------------------------ topology page
def test_topology_choices_are_the_presets():
    choices = topology_choices()
    assert choices == sorted(preset_names())
    assert {"gcp-v100-2n", "gcp-a100-4n"} <= set(choices)


def test_topology_view_of_a_preset():
    topology = load_topology("gcp-v100-2n")
    view = topology_view(topology)
    assert json.loads(json.dumps(view)) == view  # JSON-able as it is
    assert view["name"] == "gcp-v100-2n" and view["device_count"] == 16 and view["hierarchy"] == [2, 8]
    assert view["levels"] == [{"name": "node", "cardinality": 2, "devices_per_instance": 8},
                              {"name": "gpu", "cardinality": 8, "devices_per_instance": 1}]
    links = {link["name"]: link for link in view["links"]}
    assert list(links) == ["nvlink", "pcie", "nic"]
    nic = links["nic"]
    assert nic["levels"] == ["node"] and nic["bandwidth"] == 8e9 and nic["latency"] == pytest.approx(30e-6)
    assert nic["shared_by"] == 8 and nic["instances"] == 2 and nic["channel"] == 0
    assert links["pcie"]["shared_by"] == 4 and links["pcie"]["instances"] == 4
    assert links["nvlink"]["bandwidth"] == 135e9 and links["nvlink"]["levels"] == ["gpu"]
    assert view["channels"] == [0] and view["compute_slowdowns"] == {}
    assert Topology.from_yaml(view["yaml"]) == topology


def test_topology_view_shows_channels_and_fitted_link_values():
    view = topology_view(load(TWO_CHANNELS))
    links = {link["name"]: link for link in view["links"]}
    assert links["nic"]["incast"] == pytest.approx(0.1) and links["nic"]["channel"] == 0
    nic2 = links["nic2"]
    assert nic2["channel"] == 1 and nic2["reduction"] == 2e9 and nic2["compute_slowdown"] == 0.25
    assert nic2["bandwidth"] == 5e9 and nic2["latency"] == pytest.approx(40e-6) and nic2["instances"] == 2
    assert "channel=1" in nic2["text"]
    assert view["channels"] == [0, 1] and view["compute_slowdowns"] == {"1": 0.25}
    assert topology_view(Topology.from_yaml(view["yaml"])) == view


def test_load_a_preset_by_name_and_yaml_text():
    assert load("gcp-a100-4n") == load_topology("gcp-a100-4n")
    assert load("  gcp-a100-4n\n") == load_topology("gcp-a100-4n")
    text = load_topology("gcp-v100-2n").to_yaml()
    assert load(text) == load_topology("gcp-v100-2n")
    mini = yaml.safe_dump({"name": "mini", "levels": [{"name": "gpu", "cardinality": 2}],
                           "links": [{"name": "bus", "level": "gpu", "bandwidth": "1GB/s", "latency": "1us"}]},
                          default_flow_style=True, width=1000).strip()
    assert "\n" not in mini  # one line of YAML is YAML too
    assert load(mini).device_count == 2


@pytest.mark.parametrize("text, expected", [
    ("no-such-preset", "unknown topology 'no-such-preset'"),
    ("optimizer_service/hardware/presets/gcp-v100-2n.yaml", "files are not read"),  # never a path
    ("", "topology: empty"),
    ("name: x\nlevels: [\n", "malformed YAML at line 3"),
    ("name: x\nlevels: [{name: gpu, cardinality: 2}]\nlinks: []\n", "no link joins devices at level 'gpu'"),
    ("name: x\nlevelz: []\n", "unknown field 'levelz'"),
])
def test_load_rejects_bad_input_in_one_line(text, expected):
    with pytest.raises(InvalidInputError) as error:
        load(text)
    assert expected in assert_one_line(error)


def test_unknown_name_lists_the_presets():
    with pytest.raises(InvalidInputError) as error:
        load("gcp-a100")
    assert "gcp-a100-4n" in assert_one_line(error)


# ------------------------------------------------------------------- P² explorer
def test_explore_ranks_placements_and_programs_as_the_planner_does():
    topology = load_topology("gcp-a100-4n")
    data = explore(topology, (4, 16), (1,), limits=Settings().limits(), placements_limit=3, programs_limit=4)
    assert json.loads(json.dumps(data)) == data
    assert data["topology"] == "gcp-a100-4n" and data["axes"] == [4, 16] and data["reduce"] == [1]
    assert data["placements_total"] == 3
    placements = data["placements"]
    # The planner enumerates [[1 4] [4 4]] first; reducing the 16-way axis is fastest all inside one node.
    assert [p["matrix_text"] for p in placements] == ["[[4 1] [1 16]]", "[[2 2] [2 8]]", "[[1 4] [4 4]]"]
    assert [p["rank"] for p in placements] == [1, 2, 3]
    best_times = [p["programs"][0]["predicted_seconds"] for p in placements]
    assert best_times == sorted(best_times) and best_times[0] < best_times[-1]
    assert [p["programs_total"] for p in placements] == [3, 47, 47]

    direct = synthesize_placements(topology, (4, 16), (1,))
    best_placement, best_program = direct.best
    assert placements[0]["matrix"] == best_placement.matrix.to_lists()
    assert placements[0]["programs"][0]["text"] == str(best_program.program)
    assert placements[0]["programs"][0]["predicted_seconds"] == best_program.predicted_seconds
    assert data["best"]["program"] == str(best_program.program)

    by_matrix = {str(p.matrix): p for p in direct.placements}
    for placement in placements:
        report = by_matrix[placement["matrix_text"]]
        assert placement["allreduce_seconds"] == report.allreduce_seconds
        programs = placement["programs"]
        assert len(programs) == min(4, len(report.programs))
        assert [p["text"] for p in programs] == [str(r.program) for r in report.programs[:4]]
        times = [p["predicted_seconds"] for p in programs]
        assert times == sorted(times)
        for program, ranked in zip(programs, report.programs):
            assert program["speedup"] == pytest.approx(report.allreduce_seconds / ranked.predicted_seconds)
            assert [s["collective"] for s in program["steps"]] == [s.collective.value for s in ranked.lowered.steps]
            assert [s["groups"] for s in program["steps"]] == [
                [list(g) for g in s.groups[:GROUPS_SHOWN]] for s in ranked.lowered.steps]
            assert sum(s["predicted_seconds"] for s in program["steps"]) == pytest.approx(ranked.predicted_seconds)
            assert all(len(s["states_after"]) == placement["group_devices"] for s in program["steps"])
    # A hierarchical program beats the flat AllReduce on the placement that crosses nodes.
    assert placements[1]["speedup"] > 1.5


def test_explore_shows_the_device_states_after_each_step():
    data = explore(load_topology("gcp-a100-4n"), (4, 16), (0,), limits=Limits(), placements_limit=2,
                   programs_limit=1)
    placement = data["placements"][1]
    assert placement["matrix_text"] == "[[2 2] [2 8]]"
    assert placement["synthesis_hierarchy_text"] == "[(root, 1), (node, 2), (gpu, 2)]"
    assert placement["initial_states"] == ["0-3:0", "0-3:1", "0-3:2", "0-3:3"]
    [program] = placement["programs"]
    assert program["text"] == ("node InsideGroup ReduceScatter; node Parallel(root) AllReduce; "
                               "node InsideGroup AllGather")
    steps = program["steps"]
    assert [s["reduction"] for s in steps] == program["text"].split("; ")
    assert [s["states_after"] for s in steps] == [
        ["0-1:0-1", "2-3:0-1", "0-1:2-3", "2-3:2-3"],  # each holds half the chunks, summed in its node
        ["0-1:0-3", "2-3:0-3", "0-1:0-3", "2-3:0-3"],  # ... summed over both nodes
        ["0-3:0-3"] * 4,                                # every chunk, summed over the reduction group
    ]
    assert [s["input_fraction"] for s in steps] == ["1", "1/2", "1/2"]
    assert all(s["changes_state"] and s["states_omitted"] == 0 for s in steps)
    assert steps[1]["groups_total"] == 32 and len(steps[1]["groups"]) == GROUPS_SHOWN


def test_explore_caps_the_states_shown_for_a_large_reduction_group():
    data = explore(load_topology("gcp-a100-2n"), (32,), (0,), limits=Limits(), placements_limit=1, programs_limit=2)
    [placement] = data["placements"]
    assert placement["group_devices"] == 32 and len(placement["initial_states"]) == STATES_SHOWN
    for program in placement["programs"]:
        for step in program["steps"]:
            assert len(step["states_after"]) == STATES_SHOWN and step["states_omitted"] == 32 - STATES_SHOWN
    assert placement["programs"][0]["steps"][-1]["states_after"][0] == "0-31:0-31"


@pytest.mark.parametrize("limits, kwargs, expected", [
    (Limits(max_placements=2), {}, "use fewer parallelism axes (or an operator raises P2_MAX_PLACEMENTS)"),
    (Limits(), {"max_size": 9}, "lower the program size limit (or an operator raises P2_MAX_PROGRAM_SIZE)"),
    (Limits(max_synthesis_devices=8), {}, "reduce over fewer or smaller axes"),
    (Limits(max_states=3), {}, "lower the program size limit or reduce over fewer axes"),
    (Limits(max_devices=32), {}, "has 64 devices, more than the bound of 32; pick a smaller topology"),
])
def test_an_oversized_request_says_what_to_reduce(limits, kwargs, expected):
    with pytest.raises(SearchBoundError) as error:
        explore(load_topology("gcp-a100-4n"), (4, 16), (1,), limits=limits, **kwargs)
    assert expected in assert_one_line(error)


@pytest.mark.parametrize("kwargs, expected", [
    ({"placements_limit": 0}, "placements_limit 0 must be a whole number from 1 to"),
    ({"programs_limit": 1000}, "programs_limit 1000 must be a whole number from 1 to"),
    ({"algorithm": "mesh"}, "unknown algorithm 'mesh'"),
    ({"reduce": (2,)}, "2"),
])
def test_explore_rejects_bad_requests_in_one_line(kwargs, expected):
    reduce = kwargs.pop("reduce", (0,))
    with pytest.raises(InvalidInputError) as error:
        explore(load_topology("gcp-a100-4n"), (4, 16), reduce, limits=Limits(), **kwargs)
    assert expected in assert_one_line(error)


@pytest.mark.parametrize("text, expected", [
    ("4,2", (4, 2)), (" 4, 16 ", (4, 16)), ("[4 16]", (4, 16)), ("0", (0,)), ("16,2,2", (16, 2, 2)),
])
def test_parse_int_list(text, expected):
    assert parse_int_list(text, "axes") == expected


@pytest.mark.parametrize("text, expected", [
    ("4,x", "axes: 'x' is not a whole number"),
    ("4,-1", "axes: '-1' is not a whole number"),
    ("1.5", "axes: '1.5' is not a whole number"),
    ("", "axes is empty"),
    ("[ ]", "axes is empty"),
    ("4," * 200, "more than"),
])
def test_parse_int_list_rejects_bad_text_naming_the_field(text, expected):
    with pytest.raises(InvalidInputError) as error:
        parse_int_list(text, "axes")
    assert expected in assert_one_line(error)
