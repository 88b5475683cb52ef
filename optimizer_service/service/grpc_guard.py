"""What the gRPC server checks on a request's bytes before a servicer sees them.

grpc decodes a request with the method's deserializer before any handler
runs, and a deserializer that raises becomes UNKNOWN "Unexpected DecodeError"
with a traceback logged per call; its one size limit
(``grpc.max_receive_message_length``) is the largest plan's, for every
method. :class:`RequestGuard` wraps every method handler instead: grpc hands
it the raw bytes (no deserializer), and it

1. checks their size against the method's own limit (:func:`request_limit`:
   plans are big, a rank's stream messages a few MiB, everything else small),
2. decodes them with the method's real deserializer,

answering INVALID_ARGUMENT in one line naming the limit or the message type,
with nothing logged. Streaming requests (a rank's ``Connect``) are checked
message by message. The bearer token is checked before all this, from the
call's metadata alone (:mod:`optimizer_service.service.auth`): the guard only
ever sees calls that may be read.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import Any

import grpc

from optimizer_service.service.requests import RequestError
from optimizer_service.wire.limits import LINK_MESSAGE_BYTES, MAX_MESSAGE_BYTES

SMALL_REQUEST_BYTES = 64 * 1024          # every method's request unless it is named below
REQUEST_LIMITS: dict[str, int] = {
    "/p2.v1.Optimizer/SubmitPlan": MAX_MESSAGE_BYTES,
    "/p2.v1.EnforcerLink/Connect": LINK_MESSAGE_BYTES,
}
FIELD = "request"


def request_limit(method: str) -> int:
    """The most bytes one request message of ``method`` (``/package.Service/Method``) may have."""
    return REQUEST_LIMITS.get(method, SMALL_REQUEST_BYTES)


class MessageRefused(RequestError):
    """A request message the guard would not decode (too big, or not the method's message type)."""


class RequestGuard(grpc.aio.ServerInterceptor):
    """Size check and decode of every request, in one place (the innermost interceptor)."""

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        return guarded(handler, handler_call_details.method)


class Decoder:
    """The raw bytes of one request message of ``method`` → its message, or :class:`MessageRefused`."""

    def __init__(self, method: str, deserializer: Callable[[bytes], Any] | None) -> None:
        self.method, self.limit, self.deserializer = method, request_limit(method), deserializer
        self.name = _message_name(deserializer, method)

    def __call__(self, raw: bytes) -> Any:
        if len(raw) > self.limit:
            raise MessageRefused(FIELD, f"{len(raw)} bytes is more than the {_size(self.limit)} a "
                                        f"{self.method.rsplit('/', 1)[-1]} request may have")
        if self.deserializer is None:
            return raw
        try:
            return self.deserializer(raw)
        except Exception:       # protobuf's DecodeError, or whatever a deserializer raises on bytes it refuses
            raise MessageRefused(FIELD, f"not a valid {self.name} message") from None


def guarded(handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
    """``handler`` taking raw bytes, each request message size-checked and decoded by the guard.

    Every servicer of the service is async; a behaviour the guard cannot wrap (a sync
    one, or one that reads its request stream with ``context.read``) keeps grpc's own
    decoding and the server's one limit."""
    decode = Decoder(method, handler.request_deserializer)
    serializer = handler.response_serializer
    if not handler.request_streaming and not handler.response_streaming:
        behavior = handler.unary_unary
        if not inspect.iscoroutinefunction(behavior):
            return handler

        async def unary_unary(raw: bytes, context: grpc.aio.ServicerContext):
            return await behavior(await _decode_one(decode, raw, context), context)
        return grpc.unary_unary_rpc_method_handler(unary_unary, request_deserializer=None,
                                                   response_serializer=serializer)
    if not handler.request_streaming:
        behavior = handler.unary_stream
        if inspect.isasyncgenfunction(behavior):
            async def unary_stream(raw: bytes, context: grpc.aio.ServicerContext):
                request = await _decode_one(decode, raw, context)
                async with aclosing(behavior(request, context)) as responses:
                    async for response in responses:
                        yield response
        elif inspect.iscoroutinefunction(behavior):        # writes its answers with context.write (health's Watch)
            async def unary_stream(raw: bytes, context: grpc.aio.ServicerContext):
                await behavior(await _decode_one(decode, raw, context), context)
        else:
            return handler
        return grpc.unary_stream_rpc_method_handler(unary_stream, request_deserializer=None,
                                                    response_serializer=serializer)
    if handler.response_streaming:
        behavior = handler.stream_stream
        if not inspect.isasyncgenfunction(behavior):
            return handler

        async def stream_stream(raw_messages: AsyncIterator[bytes], context: grpc.aio.ServicerContext):
            try:
                async with aclosing(behavior(_decode_each(decode, raw_messages), context)) as responses:
                    async for response in responses:
                        yield response
            except MessageRefused as error:     # a servicer that let the guard's refusal through
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        return grpc.stream_stream_rpc_method_handler(stream_stream, request_deserializer=None,
                                                     response_serializer=serializer)
    behavior = handler.stream_unary
    if not inspect.iscoroutinefunction(behavior):
        return handler

    async def stream_unary(raw_messages: AsyncIterator[bytes], context: grpc.aio.ServicerContext):
        try:
            return await behavior(_decode_each(decode, raw_messages), context)
        except MessageRefused as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
    return grpc.stream_unary_rpc_method_handler(stream_unary, request_deserializer=None,
                                                response_serializer=serializer)


async def _decode_one(decode: Decoder, raw: bytes, context: grpc.aio.ServicerContext) -> Any:
    try:
        return decode(raw)
    except MessageRefused as error:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))


async def _decode_each(decode: Decoder, raw_messages: AsyncIterator[bytes]) -> AsyncIterator[Any]:
    """The decoded messages of a request stream; :class:`MessageRefused` at the first bad one
    (the link servicer answers a :class:`RequestError` with INVALID_ARGUMENT and ends the stream)."""
    async for raw in raw_messages:
        yield decode(raw)


def _message_name(deserializer: Callable[[bytes], Any] | None, method: str) -> str:
    """``p2.v1.SubmitPlanRequest`` for ``SubmitPlanRequest.FromString``; else the method's request."""
    descriptor = getattr(getattr(deserializer, "__self__", None), "DESCRIPTOR", None)
    full_name = getattr(descriptor, "full_name", None)
    return full_name if isinstance(full_name, str) else f"{method.lstrip('/')} request"


def _size(limit: int) -> str:
    return f"{limit >> 20} MiB" if limit >= 1 << 20 and limit % (1 << 20) == 0 else f"{limit >> 10} KiB"
