import pytest

from optimizer_service.catalog import load_topology, preset_names
from optimizer_service.errors import InvalidInputError
from optimizer_service.hardware.topology import Topology

GOOD = """
name: t
levels: [{name: node, cardinality: 2}, {name: gpu, cardinality: 4}]
links:
  - {name: nvlink, level: gpu, bandwidth: 100GB/s, latency: 2us}
  - {name: nic, levels: [node], bandwidth: 10GB/s, latency: 10us, shared_by: 4}
"""


def test_presets_are_the_papers_systems():
    assert {"gcp-a100-2n", "gcp-a100-4n", "gcp-v100-2n", "gcp-v100-4n", "dgx-h100"} <= set(preset_names())
    a100 = load_topology("gcp-a100-4n")
    assert a100.hierarchy == (4, 16)
    assert {link.name: link.bandwidth for link in a100.links} == {"nvswitch": 270e9, "nic": 8e9}
    assert a100.links_at(0)[0].shared_by == 16
    v100 = load_topology("gcp-v100-2n")
    assert v100.hierarchy == (2, 8)
    assert sorted(link.name for link in v100.links_at(0)) == ["nic", "pcie"]
    assert {link.name: link.bandwidth for link in v100.links} == {"nvlink": 135e9, "pcie": 32e9, "nic": 8e9}


@pytest.mark.parametrize("name", preset_names())
def test_yaml_round_trip(name):
    topo = load_topology(name)
    assert Topology.from_yaml(topo.to_yaml()) == topo


def test_file_topology_loads(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(GOOD)
    topo = load_topology(str(path))
    assert topo.device_count == 8
    assert topo.devices_per_instance(0) == 4
    assert [link.name for link in topo.links_at(1)] == ["nvlink"]


@pytest.mark.parametrize("change,message", [
    ("cardinality: 2}", "cardinality 0"),
    ("name: gpu, cardinality: 4", "appears twice"),
    ("level: gpu", "unknown level 'cpu'"),
    ("shared_by: 4", "does not divide"),
    ("latency: 2us", "unknown field 'lat'"),
    ("bandwidth: 100GB/s", "bandwidth"),
    ("name: node,", "reserved"),
    ("shared_by: 4}", "incast 1.5"),
])
def test_invalid_topologies_name_the_problem(change, message):
    replacements = {
        "cardinality: 2}": "cardinality: 0}",
        "name: gpu, cardinality: 4": "name: node, cardinality: 4",
        "level: gpu": "level: cpu",
        "shared_by: 4": "shared_by: 3",
        "latency: 2us": "lat: 2us",
        "bandwidth: 100GB/s": "bandwidth: -5GB/s",
        "name: node,": "name: root,",
        "shared_by: 4}": "shared_by: 4, incast: 1.5}",
    }
    text = GOOD.replace(change, replacements[change], 1)
    with pytest.raises(InvalidInputError, match=message):
        Topology.from_yaml(text)


def test_a_level_without_links_is_rejected():
    text = GOOD.replace("  - {name: nvlink, level: gpu, bandwidth: 100GB/s, latency: 2us}\n", "")
    with pytest.raises(InvalidInputError, match="no link joins devices at level 'gpu'"):
        Topology.from_yaml(text)


def test_malformed_yaml_reports_the_line():
    with pytest.raises(InvalidInputError, match="malformed YAML at line"):
        Topology.from_yaml("name: x\nlevels: [ {name: a\n")


@pytest.mark.parametrize("text", ["just a string", "- 1\n- 2", "name: x\nlevels: []\nlinks: []"])
def test_wrong_shapes_are_rejected(text):
    with pytest.raises(InvalidInputError):
        Topology.from_yaml(text)


def test_unknown_topology_names_the_presets():
    with pytest.raises(InvalidInputError, match="gcp-a100-4n"):
        load_topology("no-such-cluster")
    with pytest.raises(InvalidInputError, match="does not exist"):
        load_topology("/nonexistent/file.yaml")


@pytest.mark.parametrize("field,attribute,value,text,described", [
    ("incast: 0.003", "incast", 0.003, "incast=0.003", "incast 0.003 per extra flow"),
    ("reduction: 5GB/s", "reduction", 5e9, "reduction=5GB/s", "reduces 5GB/s per device"),
    ("compute_slowdown: 0.25", "compute_slowdown", 0.25, "compute_slowdown=0.25",
     "compute 25% slower while its channel runs a motif"),
])
def test_optional_link_fields_round_trip_and_are_described(field, attribute, value, text, described):
    topo = Topology.from_yaml(GOOD.replace("shared_by: 4}", f"shared_by: 4, {field}}}"))
    nic = topo.links_at(0)[0]
    assert getattr(nic, attribute) == value and text in str(nic)
    assert Topology.from_yaml(topo.to_yaml()) == topo
    assert described in topo.describe()
    assert attribute not in Topology.from_yaml(GOOD).to_yaml()


def test_a_channel_slows_compute_by_the_largest_slowdown_of_its_links():
    topo = Topology.from_yaml(GOOD.replace("shared_by: 4}", "shared_by: 4, compute_slowdown: 0.25}")
                              .replace("latency: 2us}", "latency: 2us, compute_slowdown: 0.5}"))
    assert topo.compute_slowdowns() == {0: 0.5}
    assert Topology.from_yaml(GOOD).compute_slowdowns() == {}


@pytest.mark.parametrize("value,message", [("-0.1", "must be in \\[0, 10\\]"), ("11", "must be in \\[0, 10\\]"),
                                           ("lots", "must be a number")])
def test_a_bad_compute_slowdown_is_one_line(value, message):
    with pytest.raises(InvalidInputError, match=message) as error:
        Topology.from_yaml(GOOD.replace("shared_by: 4}", f"shared_by: 4, compute_slowdown: {value}}}"))
    assert "\n" not in str(error.value) and "compute_slowdown" in str(error.value)


@pytest.mark.parametrize("value", ["0GB/s", "fast", "-1GB/s"])
def test_a_bad_reduction_rate_names_the_link(value):
    with pytest.raises(InvalidInputError, match=r"links\[\d\] \(nic\): reduction .* must be a positive rate"):
        Topology.from_yaml(GOOD.replace("shared_by: 4}", f"shared_by: 4, reduction: {value}}}"))
