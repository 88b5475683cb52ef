"""A standby's answer to everything but health checks and reflection: UNAVAILABLE,
naming the leader (:mod:`.leadership`, :mod:`optimizer_service.wire.leader`).

It reads nothing of the request (:func:`.auth.refusal`), so a standby holds no
rank streams and takes no mutation; a client that follows the name reaches the
leader on its next call.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc

from optimizer_service.service.auth import HEALTH_PREFIX, refusal
from optimizer_service.wire.leader import LEADER_METADATA_KEY

REFLECTION_PREFIX = "/grpc.reflection."


class LeaderGate(grpc.aio.ServerInterceptor):
    """``status()`` says whether this service leads and who does (None: nobody known yet)."""

    def __init__(self, status: Callable[[], tuple[bool, str | None]]) -> None:
        self._status = status

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method.startswith((HEALTH_PREFIX, REFLECTION_PREFIX)):
            return handler
        leading, leader = self._status()
        if leading:
            return handler
        if leader:
            return refusal(handler, grpc.StatusCode.UNAVAILABLE, f"this p2 serve is a standby; the leader is at "
                           f"{leader}", ((LEADER_METADATA_KEY, leader),))
        return refusal(handler, grpc.StatusCode.UNAVAILABLE, "this p2 serve is a standby and no leader is known "
                       "yet; try again in a few seconds")
