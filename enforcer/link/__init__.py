"""The rank's link to the optimizer service: the two-phase-commit participant.

* :mod:`.link` — the gRPC stream, reconnecting, its outbox, telemetry and traces;
* :mod:`.prepare` — building prepared plans off the training thread;
* :mod:`.switching` — the in-band switch check at iteration boundaries.

May import :mod:`enforcer.runtime`, :mod:`enforcer.comm` and the modules on top, the pure
decisions of :mod:`optimizer_service.control` and the contract :mod:`optimizer_service.wire`;
never the group, programs, reshard, pipeline or measure.
"""
