"""The rank's link to the optimizer service: the two-phase-commit participant.

* :mod:`.link` — the link put together and started (:func:`.link.start`, called by :mod:`enforcer.register`);
* :mod:`.stream` — the gRPC stream: reconnecting with backoff, the outbox (knows nothing of the 2PC);
* :mod:`.session` — the participant state, prepared plans, carrying out the decisions' actions;
* :mod:`.identity` — who the rank is to the service (``Register``);
* :mod:`.telemetry` — one Telemetry message per iteration; :mod:`.traces` — trace windows on request;
* :mod:`.prepare` — building prepared plans off the training thread;
* :mod:`.switching` — the in-band switch check at iteration boundaries (talks to the session only);
* :mod:`.default_group` — what the link asks of the default group, as a ``Protocol``.

May import :mod:`enforcer.runtime`, :mod:`enforcer.comm` and the modules on top, the pure
decisions of :mod:`optimizer_service.control` and the contract :mod:`optimizer_service.wire`;
never the group (it is handed one, :class:`.default_group.DefaultGroup`), programs, reshard,
pipeline or measure.
"""
