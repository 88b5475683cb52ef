"""A topology re-fitted to a telemetry fit (pure): each channel's own NIC links and
the links inside a node take the fitted rate and latency, nothing else moves."""

from __future__ import annotations

import pytest

from deploy.emulated.model import cluster_topology
from optimizer_service.hardware.topology import Topology
from optimizer_service.syndicate.refit import refit
from optimizer_service.syndicate.telemetry_fit import Line, TelemetryFit

TOPOLOGY = Topology.from_yaml(cluster_topology("t", 2, 2, 25e6, 25e6, 1e9))
CALIBRATED = Line(2e-5, 1.0, 1.0, 0)


def links(topology: Topology) -> dict:
    return {link.name: link for link in topology.links}


def test_a_slow_channel_slows_only_its_own_nic():
    fit = TelemetryFit({0: CALIBRATED, 1: Line(0.003, 5.0, 4.0, 40, ("rate", "motif_seconds", "latency"))}, CALIBRATED)
    fitted, before = links(refit(TOPOLOGY, fit)), links(TOPOLOGY)
    assert fitted["nic2"].bandwidth == pytest.approx(25e6 / 4) and fitted["nic2"].latency == pytest.approx(5e-4)
    assert fitted["nic"] == before["nic"] and fitted["loopback"] == before["loopback"]
    written = refit(TOPOLOGY, fit)
    assert "re-fitted: nic2 rate x0.25 latency x5" in written.description
    assert Topology.from_yaml(written.to_yaml()) == written              # still a valid, round-tripping topology


def test_the_host_fit_moves_the_links_inside_a_node():
    fit = TelemetryFit({0: CALIBRATED, 1: CALIBRATED}, Line(0.001, 20.0, 6.0, 300, ("rate", "motif_seconds")))
    fitted = links(refit(TOPOLOGY, fit))
    assert fitted["loopback"].bandwidth == pytest.approx(1e9 / 6) and fitted["loopback"].latency == pytest.approx(4e-4)
    assert fitted["nic"] == links(TOPOLOGY)["nic"]


def test_a_calibrated_fit_leaves_the_topology_alone():
    assert refit(TOPOLOGY, TelemetryFit({0: CALIBRATED, 1: CALIBRATED}, CALIBRATED)) is TOPOLOGY


def test_on_a_one_level_topology_the_channels_own_every_link():
    flat = Topology.from_yaml("""
name: flat
levels:
- {name: device, cardinality: 4}
links:
- {name: wire, levels: [device], bandwidth: 25000000.0, latency: 0.0001}
- {name: wire2, levels: [device], bandwidth: 25000000.0, latency: 0.0001, channel: 1}
""")
    fit = TelemetryFit({0: Line(0.0, 1.0, 2.0, 10, ("rate",)), 1: CALIBRATED}, Line(0.0, 1.0, 8.0, 10, ("rate",)))
    fitted = links(refit(flat, fit))
    assert fitted["wire"].bandwidth == pytest.approx(12.5e6) and fitted["wire2"].bandwidth == 25e6
