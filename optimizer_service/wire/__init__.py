"""The contract both planes obey on the wire, besides the ``p2.v1`` protos themselves.

The service (``optimizer_service/service/``, the ``p2`` client verbs) and the
enforcer's link to it read these from here instead of each keeping its own copy:

* :mod:`.limits` — how big a message, a Register, a Telemetry, a trace may be:
  the bounds the service enforces, and the smaller amounts a rank sends;
* :mod:`.credentials` — the token file, the ``authorization: Bearer`` metadata,
  TLS channel credentials from PEM files, and the error they raise;
* :mod:`.channel` — the gRPC channel options (message limits, the rank's
  keepalive pings) and opening a channel to the service.

Both planes may import it. It imports nothing of ``optimizer_service`` but
``errors``, and no library but ``grpc``: no torch, no FastAPI, nothing of the
service's shell (``tests/optimizer_service/wire/test_imports.py``).
"""
