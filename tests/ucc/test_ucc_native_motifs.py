"""The C++ plan runtime's UCC motifs (cpp_ext/enforcer/ucc_motifs.cpp, called through the backend's
p2::VCollectives without Python) against their Python twin enforcer/runtime/ucc_motifs.py.

Multiproc (loopback, 2, 3 and 4 ranks): every motif kind on all ranks and on a
proper subset in shuffled order, float32/float64/int64, empty, one element,
uneven and empty parts, parts with gaps and > 1 MiB: C++ equals Python bit for
bit, C++ and Python ranks run one motif together, and the int64 results are
the exact ones. In process: a backend without v-collectives is refused in one line.
"""

from __future__ import annotations

import pytest
import torch
from enforcer.comm import ucc

from enforcer.group import native
from tests.support.multiproc import run_world
from tests.ucc import ucc_motif_ranks

testing = getattr(native._native, "testing", None) if native.available() else None
pytestmark = [pytest.mark.skipif(not ucc.available(), reason=f"UCC backend not built: {ucc.why_unavailable()}"),
              pytest.mark.skipif(testing is None, reason=native.why_unavailable() or "no testing submodule")]


@pytest.mark.multiproc
@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 3, 4])
def test_cpp_ucc_motifs_equal_ucc_motifs_py_and_interoperate(world):
    reports = run_world(world, ucc_motif_ranks.compare_motifs, timeout=300)
    sets = [m for m in ucc_motif_ranks.member_sets(world) if len(m) > 1]
    for rank, report in enumerate(reports):
        assert report["checked"] == sum(len(ucc_motif_ranks.cases(len(m))) for m in sets if rank in m) > 0
        assert report["exact"] > 0 and report["mixed"] == report["checked"]
    assert [line for report in reports for line in report["differences"]] == []


def test_a_backend_without_v_collectives_is_refused_in_one_line():
    import torch.distributed as dist

    store = dist.HashStore()
    gloo = dist.ProcessGroupGloo(store, 0, 1)
    with pytest.raises(ValueError, match="has no v-collectives: a UCC channel needs enforcer._ucc's UccBackend"):
        testing.ucc_motif("AllGather", torch.zeros(4), None, [(0, 2)], (0, 0), [0], 0, gloo)
