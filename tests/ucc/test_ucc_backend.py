"""The UCC backend (``enforcer._ucc``) on real local ranks: every op equals gloo's, the v-variants
the plan motifs use are right, what UCC cannot do is refused in one line, a killed peer surfaces
as an error within the timeout, and backends and raw lib/context/team objects come and go without
leaking file descriptors, threads or memory."""

from __future__ import annotations

import multiprocessing as mp
import queue

import pytest
import torch.distributed as dist
from enforcer.comm import inner, ucc
from tests.support.multiproc import run_world
from tests.ucc import lifecycle_ranks, ucc_ranks

pytestmark = [pytest.mark.multiproc,
              pytest.mark.skipif(not ucc.available(), reason=f"UCC backend not built: {ucc.why_unavailable()}")]

SIZES = (0, 1, 37, 1 << 16)
DTYPES = ("float32", "float64", "int64")


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4, 8])
def test_every_op_equals_gloo(world):
    results = run_world(world, ucc_ranks.compare_every_op, SIZES, DTYPES, timeout=600)
    # 3 dtypes x 4 sizes x (5-7 reductions + 15 other ops + 2-3 derived) + 2 random-float cases, per rank
    assert all(r["checked"] > 250 for r in results), [r["checked"] for r in results]
    assert [m for r in results for m in r["mismatches"]] == []


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_v_variants_with_uneven_and_empty_parts(world, dtype):
    assert run_world(world, ucc_ranks.compare_v_variants, dtype, timeout=120) == [[]] * world


def test_what_ucc_cannot_do_is_refused_in_one_line_and_the_backend_goes_on():
    found = run_world(2, ucc_ranks.refusals, timeout=120)[0]
    assert found["name"] == "ucc"
    assert found["still_works"] == "[2.0, 2.0, 2.0]"
    for name in ("send", "recv"):
        assert "no point-to-point" in found[name], found[name]
    assert "bitwise reductions need an integer dtype" in found["band_float"]
    assert "no float16" in found["float16_sum"] and "float32" in found["float16_sum"]
    assert "use a floating-point dtype" in found["premul_int"]
    assert "one tensor per call" in found["two_tensors"]
    assert "split sizes add up to" in found["bad_splits"]
    for name, message in found.items():
        assert "\n" not in message, (name, message)


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 3])
def test_a_killed_peer_fails_the_others_within_the_timeout(world):
    seconds = 3.0
    server = dist.TCPStore("127.0.0.1", 0, None, is_master=True, wait_for_workers=False)
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=lifecycle_ranks.killed_peer, args=(r, world, server.port, seconds, results),
                         daemon=True) for r in range(world)]
    for proc in procs:
        proc.start()
    reports = {}
    try:
        while len(reports) < world - 1:
            rank, report = results.get(timeout=120)     # a hang would end here
            reports[rank] = report
    except queue.Empty:
        pytest.fail(f"survivors {sorted(set(range(world - 1)) - set(reports))} hung after their peer was killed")
    finally:
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
    assert procs[-1].exitcode == -9
    for rank, report in reports.items():
        assert "did not complete within its timeout of 3.0 s" in report["first"], report
        assert report["first"].startswith("DistBackendError"), report
        # failed once the timeout passed, not earlier (and, above, not never)
        assert report["elapsed"] >= seconds * 0.9, report
        assert "unusable since an earlier collective failed" in report["second"], report


@pytest.mark.slow
def test_backends_and_raw_teams_are_created_and_destroyed_without_leaks():
    for report in run_world(2, lifecycle_ranks.create_and_destroy, 50, timeout=600):
        before, after = report["before"], report["after"]
        assert after["fds"] == before["fds"], report
        assert after["threads"] == before["threads"], report
        assert after["rss"] - before["rss"] < 32 << 20, report     # 50 rounds: well under 1 MiB each


def test_the_inner_backend_map_takes_ucc_for_cpu_only():
    mapping = inner.parse_inner("ucc")
    assert mapping["cpu"] == "ucc" and mapping.get("cuda", "nccl") != "ucc"
    assert inner.backend_type("ucc") == dist.ProcessGroup.BackendType.CUSTOM
    with pytest.raises(inner.InnerBackendError, match="CPU tensors only"):
        inner.parse_inner("cpu:gloo,cuda:ucc")


def test_the_bindings_report_ucc_1_3_0():
    assert ucc.version().startswith("1.3.0")
