"""Generate ``p2.v1``'s Python from ``proto/p2/v1/*.proto`` (grpcio-tools).

A stamp file holds the digest of the ``.proto`` sources the modules were made
from; :func:`ensure_generated` regenerates when the digest differs (or a
module is missing), under a file lock so that several ranks importing at once
generate once. Files are written to a temporary folder and moved in, the stamp
last: an interrupted run leaves no stamp and is redone. Where the sources are
not beside the package (an installed wheel), the modules shipped with it are
used as they are.

``python -m p2.v1.generate`` regenerates unconditionally (the setup runs it).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTO_ROOT = HERE.parents[1] / "proto"
SOURCES = ("plan", "enforcer_link", "optimizer")
STAMP = HERE / "_stamp"


class StubGenerationError(ImportError):
    """The stubs are stale or missing and cannot be generated here."""


def _proto_files() -> list[Path]:
    return [PROTO_ROOT / "p2" / "v1" / f"{name}.proto" for name in SOURCES]


def _outputs() -> list[Path]:
    outputs = []
    for name in SOURCES:
        outputs += [HERE / f"{name}_pb2.py", HERE / f"{name}_pb2.pyi", HERE / f"{name}_pb2_grpc.py"]
    return outputs


def sources_digest() -> str | None:
    """The digest of the ``.proto`` sources, or ``None`` when they are not here."""
    files = _proto_files()
    if not all(path.is_file() for path in files):
        return None
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _current(digest: str) -> bool:
    try:
        return STAMP.read_text().strip() == digest and all(path.is_file() for path in _outputs())
    except OSError:
        return False


def ensure_generated() -> None:
    """Regenerate the modules if the ``.proto`` sources changed since they were made."""
    digest = sources_digest()
    if digest is None:
        if not all(path.is_file() for path in _outputs()):
            raise StubGenerationError(f"p2.v1: neither the generated modules nor proto/p2/v1/*.proto are in {HERE}")
        return
    if _current(digest):
        return
    try:
        with open(HERE / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not _current(digest):
                generate(digest)
    except OSError as error:
        raise StubGenerationError(f"p2.v1: the generated modules are stale and {HERE} is not writable "
                                  f"({error.strerror}); run scripts/setup.sh as the checkout's owner") from None


def generate(digest: str | None = None) -> None:
    """Run protoc on the sources and move the modules in, the stamp last."""
    try:
        from grpc_tools import protoc
    except ImportError:
        raise StubGenerationError("p2.v1: the generated modules are stale or missing and grpcio-tools is not "
                                  "installed; run scripts/setup.sh") from None
    digest = digest or sources_digest()
    include = str(Path(protoc.__file__).resolve().parent / "_proto")
    with tempfile.TemporaryDirectory(prefix="p2-protoc-", dir=HERE) as out:
        args = ["protoc", f"-I{PROTO_ROOT}", f"-I{include}", f"--python_out={out}", f"--pyi_out={out}",
                f"--grpc_python_out={out}", *map(str, _proto_files())]
        if protoc.main(args) != 0:
            raise StubGenerationError(f"p2.v1: protoc failed on {PROTO_ROOT}/p2/v1/*.proto (see its messages above)")
        STAMP.unlink(missing_ok=True)
        for target in _outputs():
            os.replace(Path(out, "p2", "v1", target.name), target)
        STAMP.write_text(f"{digest}\n")


if __name__ == "__main__":
    generate()
    print(f"p2.v1: generated {len(_outputs())} modules from {PROTO_ROOT}/p2/v1", file=sys.stderr)
