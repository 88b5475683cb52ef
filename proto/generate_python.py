"""Generate the Python of ``proto/p2/v1/*.proto`` (the package ``p2.v1``) with grpcio-tools.

A build step beside its sources, never shipped: ``setup.py``'s ``build_protos``
command runs :func:`generate` when the package is built or installed (into the
build folder for a wheel, into the source tree for ``pip install -e``), and
``tests/p2/test_generated_stubs.py`` runs it into a temporary folder to hold the
installed modules to the ``.proto`` files as they are now.

Beside the modules, ``_stamp`` holds :func:`sources_digest` of the sources they
were made from. The modules are written to a temporary folder and moved in, the
stamp last: a process importing ``p2.v1`` during a rebuild sees whole files, and
an interrupted run leaves no stamp.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from grpc_tools import protoc   # a build requirement (and of the dev extra), not of a runtime install

PROTO_ROOT = Path(__file__).resolve().parent
SOURCES = ("plan", "enforcer_link", "optimizer")
STAMP = "_stamp"
#: The files :func:`generate` writes, the stamp last.
OUTPUTS = tuple(f"{name}{suffix}" for name in SOURCES for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")) + (STAMP,)


class GenerationError(RuntimeError):
    """protoc rejected the ``.proto`` sources."""


def proto_files() -> list[Path]:
    return [PROTO_ROOT / "p2" / "v1" / f"{name}.proto" for name in SOURCES]


def sources_digest() -> str:
    """The digest of the ``.proto`` sources that ``_stamp`` records."""
    digest = hashlib.sha256()
    for path in proto_files():
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def generate(target: Path) -> None:
    """Run protoc on the sources and move the modules into ``target`` (``.../p2/v1``), the stamp last."""
    digest = sources_digest()        # of the files protoc reads next
    target.mkdir(parents=True, exist_ok=True)
    include = str(Path(protoc.__file__).resolve().parent / "_proto")
    with tempfile.TemporaryDirectory(prefix="p2-protoc-", dir=target) as out:
        args = ["protoc", f"-I{PROTO_ROOT}", f"-I{include}", f"--python_out={out}", f"--pyi_out={out}",
                f"--grpc_python_out={out}", *map(str, proto_files())]
        if protoc.main(args) != 0:
            raise GenerationError(f"protoc failed on {PROTO_ROOT}/p2/v1/*.proto (see its messages above)")
        (target / STAMP).unlink(missing_ok=True)
        for name in OUTPUTS[:-1]:
            os.replace(Path(out, "p2", "v1", name), target / name)
        (target / STAMP).write_text(f"{digest}\n")
