"""A plan's channels travel over the node's NICs: on an emulated cluster with two
NICs per node, a plan that names no interface for channel 1 (the service's
plans name none: it cannot know each node's NIC names) runs channel 1 over
each node's second NIC (``P2_CHANNEL_IFNAMES``), not the default one; so do
the subgroups the measuring jobs bind to channel 1
(:class:`enforcer.comm.subgroups.GroupCache`), without touching the environment.
The emulated cluster needs root (network namespaces); the pure part and the
loopback part run everywhere."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import pytest

from deploy.emulated import can_manage_namespaces, create_cluster, destroy_cluster, nic_drops, run_ranks
from enforcer.runtime.channels import channel_interface
from optimizer_service.plan.plan import Plan
from tests.enforcer import nic_ranks
from tests.support.multiproc import run_world

RANKS = Path(__file__).with_name("nic_ranks.py")


def test_a_channel_without_an_interface_takes_the_nodes_nic_for_it():
    plan = Plan(version=1, world_size=2, channels={0: None, 1: None, 2: "ib0"}, ops=())
    nics = ("nic0", "nic1")
    assert [channel_interface(plan, c, nics) for c in range(3)] == ["nic0", "nic1", "ib0"]
    assert channel_interface(plan, 1, ()) is None            # no NICs known: the inner backend's default
    assert channel_interface(Plan(version=1, world_size=2, channels={0: None, 1: None, 3: None}, ops=()), 3,
                             nics) is None


@pytest.mark.multiproc
@pytest.mark.skipif(not can_manage_namespaces(), reason="the emulated cluster needs CAP_NET_ADMIN (root)")
def test_channel_one_runs_over_each_nodes_second_nic(tmp_path):
    name = "p2nictest"
    destroy_cluster(name, root=tmp_path)
    info = create_cluster(name, 2, 1, 25e6, 25e6, loopback_rate=1e9, shaped=True, root=tmp_path)
    out = io.StringIO()
    try:
        code = run_ranks(info, [sys.executable, str(RANKS)], out=out, err=out, timeout=120)
        drops = nic_drops(info)
    finally:
        destroy_cluster(name, root=tmp_path)
    assert code == 0, out.getvalue()[-3000:]
    assert set(drops) == {0, 1} and all(isinstance(n, int) and n >= 0 for n in drops.values()), drops
    reports = {int(rank): json.loads(body) for rank, body in re.findall(r"^\[r(\d+)\] NIC (.*)$", out.getvalue(), re.M)}
    assert sorted(reports) == [0, 1], out.getvalue()[-3000:]
    for rank, report in reports.items():
        assert report["correct"] and report["enforced"], report
        nic0, nic1 = report["nics"]
        assert nic1 in report["connected"], f"rank {rank}: no connection from its second NIC {nic1}: {report}"


@pytest.mark.multiproc
def test_subgroups_bound_to_an_interface_use_it_and_leave_the_environment_alone():
    reports = run_world(2, nic_ranks.bound_subgroup, "lo")
    assert all(report["correct"] and report["environment_unchanged"] for report in reports), reports
    errors = run_world(2, nic_ranks.unbindable_subgroup, "p2-no-such-nic")
    assert all("p2-no-such-nic" in error for error in errors), errors       # gloo was asked for that interface


@pytest.mark.multiproc
@pytest.mark.skipif(not can_manage_namespaces(), reason="the emulated cluster needs CAP_NET_ADMIN (root)")
def test_subgroups_bound_to_channel_one_connect_from_each_nodes_second_nic(tmp_path):
    name = "p2nicsub"
    destroy_cluster(name, root=tmp_path)
    info = create_cluster(name, 2, 1, 25e6, 25e6, loopback_rate=1e9, shaped=True, root=tmp_path)
    out = io.StringIO()
    try:
        code = run_ranks(info, [sys.executable, str(RANKS), "subgroups"], out=out, err=out, timeout=120)
    finally:
        destroy_cluster(name, root=tmp_path)
    assert code == 0, out.getvalue()[-3000:]
    reports = {int(rank): json.loads(body)
               for rank, body in re.findall(r"^\[r(\d+)\] SUBGROUP (.*)$", out.getvalue(), re.M)}
    assert sorted(reports) == [0, 1], out.getvalue()[-3000:]
    for rank, report in reports.items():
        assert report["correct"] and report["environment_unchanged"], report
        nic1 = report["nics"][1]
        assert report["new_connections"] == [nic1], f"rank {rank}: the subgroup did not connect from {nic1}: {report}"
