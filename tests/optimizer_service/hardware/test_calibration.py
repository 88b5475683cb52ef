"""Calibration fits link parameters through the simulator (pure)."""

import pytest

from optimizer_service.errors import InvalidInputError
from optimizer_service.hardware.calibration import coefficients, fit, probes
from optimizer_service.hardware.cost_model import CostModel
from optimizer_service.hardware.topology import Topology

CLUSTER = Topology.from_yaml("""
name: emulated
levels: [{name: node, cardinality: 2}, {name: device, cardinality: 4}]
links:
  - {name: loopback, level: device, bandwidth: 3GB/s, latency: 20us}
  - {name: nic, level: node, bandwidth: 25MB/s, latency: 100us, shared_by: 4}
  - {name: nic2, level: node, bandwidth: 12.5MB/s, latency: 100us, shared_by: 4, channel: 1}
""")


def test_probes_stay_on_their_link_and_channel():
    found, notes = probes(CLUSTER)
    assert notes == []
    assert {p.link for p in found} == {"loopback", "nic", "nic2"}
    for probe in found:
        a, b = coefficients(CLUSTER, probe)
        assert a > 0 and b > 0
        others = [link.name for link in CLUSTER.links if link.name != probe.link]
        for other in others:  # making another link infinitely fast changes nothing
            faster = Topology.from_dict({**CLUSTER.to_dict(), "links": [
                {**d, "bandwidth": "1e15", "latency": 0} if d["name"] == other else d
                for d in CLUSTER.to_dict()["links"]]})
            model = CostModel(faster, channel=probe.channel)
            assert model.program_seconds(probe.program, probe.nbytes) == pytest.approx(
                CostModel(CLUSTER, channel=probe.channel).program_seconds(probe.program, probe.nbytes))
    assert {p.channel for p in found if p.link == "nic2"} == {1}


def test_fit_recovers_the_parameters_that_produced_the_times():
    truth = Topology.from_dict({**CLUSTER.to_dict(), "links": [
        {**d, "bandwidth": {"loopback": "1.2GB/s", "nic": "23MB/s", "nic2": "11MB/s"}[d["name"]],
         "latency": {"loopback": "300us", "nic": "450us", "nic2": "1ms"}[d["name"]]}
        for d in CLUSTER.to_dict()["links"]]})
    found, _ = probes(CLUSTER)
    measured = [(p, CostModel(truth, channel=p.channel).program_seconds(p.program, p.nbytes)) for p in found]
    calibrated, fits = fit(CLUSTER, measured)
    by_name = {link.name: link for link in calibrated.links}
    for link in truth.links:
        assert by_name[link.name].bandwidth == pytest.approx(link.bandwidth, rel=1e-3)
        assert by_name[link.name].latency == pytest.approx(link.latency, rel=1e-3)
    assert all(f.mape < 1e-3 for f in fits)
    assert Topology.from_yaml(calibrated.to_yaml()) == calibrated  # the file round-trips


def test_fit_refuses_times_that_do_not_grow_with_size():
    found, _ = probes(CLUSTER)
    with pytest.raises(InvalidInputError, match="do not grow"):
        fit(CLUSTER, [(p, 0.01) for p in found if p.link == "nic"])


def test_a_level_with_two_links_of_one_channel_is_reported_not_guessed():
    both = Topology.from_yaml("""
name: v100-like
levels: [{name: node, cardinality: 2}, {name: gpu, cardinality: 2}]
links:
  - {name: nvlink, level: gpu, bandwidth: 100GB/s, latency: 2us}
  - {name: pcie, levels: [node], bandwidth: 10GB/s, latency: 5us, shared_by: 2}
  - {name: nic, levels: [node], bandwidth: 3GB/s, latency: 10us, shared_by: 2}
""")
    found, notes = probes(both)
    assert {p.link for p in found} == {"nvlink"}
    assert len(notes) == 2 and all("cannot tell them apart" in n for n in notes)
