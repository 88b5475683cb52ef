"""Messages and stubs of ``proto/p2/v1/*.proto``: ``plan_pb2``,
``enforcer_link_pb2`` (+ ``_grpc``), ``optimizer_pb2`` (+ ``_grpc``).

The setup generates them; importing this package first checks that they were
generated from the ``.proto`` files as they are now and regenerates them when
a file changed (:mod:`p2.v1.generate`), so a stale stub is never imported.
"""

from p2.v1.generate import ensure_generated

ensure_generated()
