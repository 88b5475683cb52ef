"""Messages and stubs of ``proto/p2/v1/*.proto``: ``plan_pb2``,
``enforcer_link_pb2`` (+ ``_grpc``), ``optimizer_pb2`` (+ ``_grpc``).

Generated when the package is built or installed (``setup.py``'s
``build_protos`` step runs ``proto/generate_python.py``) and shipped in the
wheel; ``_stamp`` holds the digest of the ``.proto`` files they were made from.
Importing this package never runs protoc: it only checks that the modules are
there. ``tests/p2/test_generated_stubs.py`` fails when they are stale.
"""

from pathlib import Path

if not all((Path(__file__).parent / f"{name}.py").is_file()
           for name in ("plan_pb2", "plan_pb2_grpc", "enforcer_link_pb2", "enforcer_link_pb2_grpc", "optimizer_pb2",
                        "optimizer_pb2_grpc")):
    raise ImportError("p2.v1: the modules generated from proto/p2/v1/*.proto are missing; "
                      "run scripts/setup.sh (or pip install .)")
