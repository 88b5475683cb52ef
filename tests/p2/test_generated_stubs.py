"""The generated contract: the installed ``p2.v1`` modules are what the .proto
files generate as they are now (the build made them, see setup.py), and
importing them never runs protoc."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import p2.v1

ROOT = Path(__file__).resolve().parents[2]
INSTALLED = Path(p2.v1.__file__).resolve().parent
MISSING_HINT = "the modules generated from proto/p2/v1/*.proto are missing; run scripts/setup.sh (or pip install .)"


def _generator(proto_root: Path = ROOT / "proto") -> ModuleType:
    """``proto/generate_python.py`` of a checkout: a build script, not a module of the package."""
    spec = importlib.util.spec_from_file_location("generate_python", proto_root / "generate_python.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _changed_copy(tmp_path: Path) -> Path:
    """A copy of proto/ whose plan.proto has one more field."""
    proto = tmp_path / "proto"
    shutil.copytree(ROOT / "proto", proto, ignore=shutil.ignore_patterns("__pycache__"))
    source = proto / "p2" / "v1" / "plan.proto"
    text = source.read_text()
    anchor = "optional double predicted_iteration_seconds = 6;"
    assert anchor in text
    source.write_text(text.replace(anchor, f"{anchor}\n  string note = 999;"))
    return proto


def _import(root: Path, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})


def test_the_services_and_messages_are_importable():
    from p2.v1 import enforcer_link_pb2, enforcer_link_pb2_grpc, optimizer_pb2, optimizer_pb2_grpc, plan_pb2
    assert enforcer_link_pb2.RankMessage.DESCRIPTOR.oneofs_by_name["body"]
    assert hasattr(enforcer_link_pb2_grpc, "EnforcerLinkServicer") and hasattr(optimizer_pb2_grpc, "OptimizerStub")
    assert optimizer_pb2.DESCRIPTOR.services_by_name["Optimizer"].methods_by_name["Watch"].server_streaming
    assert plan_pb2.Plan.DESCRIPTOR.full_name == "p2.v1.Plan"


def test_the_stamp_is_the_digest_of_the_proto_files_as_they_are_now():
    assert (INSTALLED / "_stamp").read_text().strip() == _generator().sources_digest(), \
        "p2.v1 was generated from other .proto files: run scripts/setup.sh"


def test_the_installed_modules_are_what_the_proto_files_generate_now(tmp_path):
    generator = _generator()
    fresh = tmp_path / "p2" / "v1"
    generator.generate(fresh)
    assert sorted(path.name for path in fresh.iterdir()) == sorted(generator.OUTPUTS)
    stale = [name for name in generator.OUTPUTS if (INSTALLED / name).read_bytes() != (fresh / name).read_bytes()]
    assert not stale, f"p2.v1 differs from what proto/p2/v1/*.proto generate now in {stale}: run scripts/setup.sh"


def test_a_changed_proto_changes_the_digest_and_the_modules(tmp_path):
    """The two checks above can fail: one more field is a new digest and new bytes."""
    generator = _generator(_changed_copy(tmp_path))
    assert generator.sources_digest() != (INSTALLED / "_stamp").read_text().strip()
    out = tmp_path / "out"
    generator.generate(out)
    assert (out / "plan_pb2.py").read_bytes() != (INSTALLED / "plan_pb2.py").read_bytes()
    assert (out / "_stamp").read_text().strip() == generator.sources_digest()
    # Where the sources and the output lie is not in the bytes: an unchanged file generates the same.
    assert (out / "enforcer_link_pb2.py").read_bytes() == (INSTALLED / "enforcer_link_pb2.py").read_bytes()


def test_importing_never_generates_even_beside_a_changed_proto(tmp_path):
    _changed_copy(tmp_path)
    shutil.copytree(INSTALLED.parent, tmp_path / "p2", ignore=shutil.ignore_patterns("__pycache__"))
    before = {path.name: path.read_bytes() for path in (tmp_path / "p2" / "v1").iterdir()}
    # protoc cannot even be imported here (grpc itself imports the grpc_tools package when it is installed).
    result = _import(tmp_path, "import sys; sys.modules['grpc_tools.protoc'] = None; "
                               "from p2.v1 import enforcer_link_pb2_grpc, optimizer_pb2_grpc, plan_pb2; "
                               "print('note' in plan_pb2.Plan.DESCRIPTOR.fields_by_name)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
    after = {path.name: path.read_bytes() for path in (tmp_path / "p2" / "v1").iterdir() if path.name != "__pycache__"}
    assert after == before


def test_missing_modules_are_one_line_that_says_how_to_make_them(tmp_path):
    shutil.copytree(INSTALLED.parent, tmp_path / "p2", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "p2" / "v1" / "optimizer_pb2_grpc.py").unlink()
    result = _import(tmp_path, "import p2.v1")
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == f"ImportError: p2.v1: {MISSING_HINT}"
    assert not (tmp_path / "p2" / "v1" / "optimizer_pb2_grpc.py").exists()
