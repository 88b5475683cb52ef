"""``p2.v1.EnforcerLink``: one long-lived bidirectional stream per rank.

The first message must be ``Register``; then the rank's votes, acks and
telemetry go to the core, and whatever the core puts in the rank's outbox is
written back. A malformed message ends the stream with INVALID_ARGUMENT naming
the field (the enforcer logs it and reconnects later); a stream that ends
marks the rank lost.
"""

from __future__ import annotations

import asyncio
import logging

import grpc

from optimizer_service.service.core import ServiceCore
from optimizer_service.service.errors_map import one_line, status_of
from optimizer_service.service.jobs import RankSession
from p2.v1 import enforcer_link_pb2_grpc

log = logging.getLogger("p2.service")


class EnforcerLinkServicer(enforcer_link_pb2_grpc.EnforcerLinkServicer):
    def __init__(self, core: ServiceCore) -> None:
        self.core = core

    async def Connect(self, request_iterator, context: grpc.aio.ServicerContext):
        try:
            first = await request_iterator.__anext__()
        except StopAsyncIteration:
            return
        if first.WhichOneof("body") != "register":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "register: the first message of a stream must be "
                                                                  "Register")
        try:
            session = await self.core.register(first.register)     # all or nothing: a failure left no session
        except Exception as error:
            await _abort(context, error)
        problem: list[Exception] = []
        reader: asyncio.Task | None = None
        try:                            # from here on, however the stream ends, the rank is disconnected
            reader = asyncio.get_running_loop().create_task(self._read(session, request_iterator, problem))
            while True:
                message = await session.outbox.get()
                if message is None:
                    break
                yield message
        finally:
            if reader is not None:
                reader.cancel()
            await self.core.disconnect(session)
        if problem:
            await _abort(context, problem[0])

    async def _read(self, session: RankSession, request_iterator, problem: list[Exception]) -> None:
        try:
            async for message in request_iterator:
                await self.core.on_rank_message(session, message)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            if status_of(error) is None and not isinstance(error, grpc.RpcError):
                log.exception("job %s rank %d: handling a message failed", session.job_id, session.rank)
            problem.append(error)
        finally:
            session.close()


async def _abort(context: grpc.aio.ServicerContext, error: Exception) -> None:
    code = status_of(error)
    if code is None:
        log.error("internal error: %s", one_line(error), exc_info=error)
        code = grpc.StatusCode.INTERNAL
    await context.abort(code, one_line(error))
