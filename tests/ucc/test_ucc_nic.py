"""A UCC channel travels over the node's NIC for it: on an emulated cluster with two NICs per
node, a plan's channel 1 on UCC (``P2_CHANNEL_BACKENDS=gloo,ucc``) opens its connections from
each node's second NIC, and only from it. Needs root (network namespaces).

UCX lists NICs from ``/sys/class/net``; the launcher gives every rank its node's sysfs
(:func:`deploy.emulated.probe.in_namespace`, what ``ip netns exec`` does). Without it UCX would
see none of the node's NICs, and the channel would be refused in one line that says so."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import pytest

from deploy.emulated import can_manage_namespaces, create_cluster, destroy_cluster, run_ranks
from enforcer.comm import ucc
from tests.enforcer.impls import IMPLS

RANKS = Path(__file__).with_name("ucc_nic_ranks.py")
ENV = {"P2_CHANNEL_BACKENDS": "gloo,ucc"}

pytestmark = [pytest.mark.multiproc, pytest.mark.netns, pytest.mark.slow,
              pytest.mark.skipif(not ucc.available(), reason=f"UCC backend not built: {ucc.why_unavailable()}"),
              pytest.mark.skipif(not can_manage_namespaces(), reason="the emulated cluster needs CAP_NET_ADMIN (root)")]


def _run(tmp_path, name: str, command: list[str], impl: str) -> tuple[int, str]:
    destroy_cluster(name, root=tmp_path)
    info = create_cluster(name, 2, 1, 25e6, 25e6, loopback_rate=1e9, shaped=True, root=tmp_path)
    out = io.StringIO()
    try:
        code = run_ranks(info, command, out=out, err=out, timeout=180, env={**ENV, "P2_ENFORCER_IMPL": impl})
    finally:
        destroy_cluster(name, root=tmp_path)
    return code, out.getvalue()


@pytest.mark.parametrize("impl", IMPLS)
def test_channel_one_on_ucc_runs_over_each_nodes_second_nic_only(tmp_path, impl):
    code, output = _run(tmp_path, "p2uccnic", [sys.executable, str(RANKS)], impl)
    assert code == 0, output[-3000:]
    reports = {int(rank): json.loads(body) for rank, body in re.findall(r"^\[r(\d+)\] NIC (.*)$", output, re.M)}
    assert sorted(reports) == [0, 1], output[-3000:]
    for rank, report in reports.items():
        assert report["correct"] and report["enforced"], report
        assert report["backends"] == ["ucc"], report
        nic0, nic1 = report["nics"]
        assert report["new_connections"], f"rank {rank}: the UCC channel opened no TCP connection: {report}"
        assert set(report["new_connections"]) == {nic1}, f"rank {rank}: UCC connections not only from {nic1}: {report}"
