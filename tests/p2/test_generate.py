"""The generated contract: stubs come from the .proto files as they are now;
a changed .proto is regenerated at import, never imported stale."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    shutil.copytree(ROOT / "proto", root / "proto")
    shutil.copytree(ROOT / "p2", root / "p2", ignore=shutil.ignore_patterns("__pycache__", ".lock"))
    return root


def _run(root: Path, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})


def test_the_services_and_messages_are_importable():
    from p2.v1 import enforcer_link_pb2, enforcer_link_pb2_grpc, optimizer_pb2, optimizer_pb2_grpc, plan_pb2
    assert enforcer_link_pb2.RankMessage.DESCRIPTOR.oneofs_by_name["body"]
    assert hasattr(enforcer_link_pb2_grpc, "EnforcerLinkServicer") and hasattr(optimizer_pb2_grpc, "OptimizerStub")
    assert optimizer_pb2.DESCRIPTOR.services_by_name["Optimizer"].methods_by_name["Watch"].server_streaming
    assert plan_pb2.Plan.DESCRIPTOR.full_name == "p2.v1.Plan"


def test_a_changed_proto_is_regenerated_at_import(tmp_path):
    root = _copy(tmp_path)
    probe = "from p2.v1 import plan_pb2; print('note' in plan_pb2.Plan.DESCRIPTOR.fields_by_name)"
    before = _run(root, probe)
    assert before.returncode == 0, before.stderr
    assert before.stdout.strip() == "False"
    source = root / "proto" / "p2" / "v1" / "plan.proto"
    text = source.read_text()
    source.write_text(text.replace("optional double predicted_iteration_seconds = 6;",
                                   "optional double predicted_iteration_seconds = 6;\n  string note = 7;"))
    after = _run(root, probe)
    assert after.returncode == 0, after.stderr
    assert after.stdout.strip() == "True"
    assert (root / "p2" / "v1" / "_stamp").read_text().strip() != ""


def test_a_deleted_stub_is_regenerated_and_without_sources_the_shipped_stubs_are_used(tmp_path):
    root = _copy(tmp_path)
    (root / "p2" / "v1" / "optimizer_pb2_grpc.py").unlink()
    result = _run(root, "from p2.v1 import optimizer_pb2_grpc; print(optimizer_pb2_grpc.OptimizerStub.__name__)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "OptimizerStub"
    shutil.rmtree(root / "proto")           # an installed wheel: stubs without their sources
    shipped = _run(root, "from p2.v1 import plan_pb2; print(plan_pb2.Plan.DESCRIPTOR.name)")
    assert shipped.returncode == 0, shipped.stderr
    assert shipped.stdout.strip() == "Plan"
    (root / "p2" / "v1" / "plan_pb2.py").unlink()
    missing = _run(root, "import p2.v1")
    assert missing.returncode != 0 and "neither the generated modules nor proto/p2/v1/*.proto" in missing.stderr
