"""The service's gRPC request latency and errors (``p2_service_request_seconds``,
``p2_service_request_errors_total``), measured by a server interceptor.

Calls with one answer are timed from the handler's start to its answer, with
their status: a unary call, and a unary call refused for want of the token
(:mod:`optimizer_service.service.auth` answers it with a request-streaming
handler that never reads the request). Streams (a rank's ``Connect``,
``Watch``, ``GetTraces``) are not: their length is the job's or the client's,
not the service's."""

from __future__ import annotations

import time

import grpc

from optimizer_service.metrics import ServiceMetrics


class RequestMetricsInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, metrics: ServiceMetrics) -> None:
        self.metrics = metrics

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or handler.response_streaming:
            return handler
        method = handler_call_details.method.rsplit("/", 1)[-1]
        streaming = handler.request_streaming
        inner = handler.stream_unary if streaming else handler.unary_unary
        metrics = self.metrics

        async def timed(request, context):
            code = "UNKNOWN"
            started = time.perf_counter()
            try:
                answer = await inner(request, context)
                code = None
                return answer
            except BaseException:
                code = _code(context)
                raise
            finally:
                metrics.on_request("grpc", method, time.perf_counter() - started, code)

        make = grpc.stream_unary_rpc_method_handler if streaming else grpc.unary_unary_rpc_method_handler
        return make(timed, request_deserializer=handler.request_deserializer,
                    response_serializer=handler.response_serializer)


def _code(context) -> str:
    try:
        code = context.code()
    except Exception:
        code = None
    return code.name if isinstance(code, grpc.StatusCode) else "UNKNOWN"
