"""The enforcer's settings, read once from ``P2_*`` environment variables.

Read when the backend is registered (:func:`enforcer.register`, which torch's
entry point runs) or on first use, then passed to what needs them; nothing
else in the enforcer reads the environment. A malformed value is one line
naming the variable (the backend then keeps its defaults and logs it).

=====================  =========================================================
``P2_INNER_BACKEND``   inner backend(s): ``gloo``, ``nccl``, ``cpu:gloo,cuda:nccl``
``P2_TRACE_FILE``      where each rank writes its trace (``{rank}`` is replaced)
``P2_TRACE_LIMIT``     most recent ops kept per rank (default 200000)
``P2_PLAN_FILE``       a plan to enforce from the first op on
``P2_COUNT_BYPASS``    ``0`` turns off counting ops that bypass the enforcer
``P2_CHANNEL_IFNAMES`` the node's NICs, one per channel (``nic0,nic1``; set by
                       the emulated cluster's launcher)
=====================  =========================================================
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from optimizer_service.plan import InvalidInputError

DEFAULT_TRACE_LIMIT = 200_000


@dataclass(frozen=True)
class EnforcerSettings:
    inner_backend: str | None = None
    trace_file: str | None = None
    trace_limit: int = DEFAULT_TRACE_LIMIT
    plan_file: str | None = None
    count_bypass: bool = True
    channel_ifnames: tuple[str, ...] = ()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> EnforcerSettings:
        env = os.environ if environ is None else environ
        limit_text = env.get("P2_TRACE_LIMIT", "").strip()
        try:
            limit = int(limit_text) if limit_text else DEFAULT_TRACE_LIMIT
        except ValueError:
            raise InvalidInputError(f"P2_TRACE_LIMIT={limit_text!r} is not a whole number of ops") from None
        if limit < 1:
            raise InvalidInputError(f"P2_TRACE_LIMIT={limit} must be at least 1")
        bypass = env.get("P2_COUNT_BYPASS", "1").strip()
        if bypass not in ("0", "1"):
            raise InvalidInputError(f"P2_COUNT_BYPASS={bypass!r} must be 0 or 1")
        return cls(inner_backend=env.get("P2_INNER_BACKEND") or None, trace_file=env.get("P2_TRACE_FILE") or None,
                   trace_limit=limit, plan_file=env.get("P2_PLAN_FILE") or None, count_bypass=bypass == "1",
                   channel_ifnames=tuple(name for name in env.get("P2_CHANNEL_IFNAMES", "").split(",") if name))
