"""Who may talk to the service: a bearer token, and optional (mutual) TLS.

With a token configured, every RPC except the standard health check
(Kubernetes probes send no metadata) must carry ``authorization: Bearer
TOKEN``; others are refused with UNAUTHENTICATED and one line, from the call's
metadata alone: the refusal never reads the request, so a caller without the
token cannot make the service buffer or decode a byte of its body. TLS is
configured from PEM files; with a CA file the service also requires and
checks client certificates (mutual TLS).

The token file, the metadata and the files' errors are the contract's, shared
with the enforcer (:mod:`optimizer_service.wire.credentials`); the rules here
are the service's: the shortest token it accepts, which calls need one.
"""

from __future__ import annotations

from pathlib import Path

import grpc

from optimizer_service.service.token_source import TokenSource
from optimizer_service.wire import credentials
from optimizer_service.wire.credentials import METADATA_KEY, OPTION_NAMES, AuthSetupError, read_file

HEALTH_PREFIX = "/grpc.health.v1.Health/"

MIN_TOKEN_LENGTH = 16
"""Shortest token accepted: a guessable token opens every job (16 hex digits are 64 bits)."""
MAKE_TOKEN = "make one with 'openssl rand -hex 32' or python -c 'import secrets; print(secrets.token_hex(32))'"


def check_token(token: str, where: str) -> str:
    """``token`` if it is long enough to be a secret; else one line saying how to make one."""
    if len(token) < MIN_TOKEN_LENGTH:
        raise AuthSetupError(f"{where} holds a token of {len(token)} characters, fewer than the "
                             f"{MIN_TOKEN_LENGTH} required; {MAKE_TOKEN}")
    return token


def read_token(path: str | Path) -> str:
    """The service's token in ``path``: the file's one token (surrounding whitespace stripped),
    long enough to be a secret; one line if it is not."""
    return check_token(credentials.read_token(path, OPTION_NAMES), OPTION_NAMES.of(OPTION_NAMES.token, path))


def server_credentials(cert: str | None, key: str | None, ca: str | None) -> grpc.ServerCredentials | None:
    """TLS credentials from PEM files (``None`` without a certificate); mutual TLS with ``ca``."""
    if not cert and not key and not ca:
        return None
    if not cert or not key:
        raise AuthSetupError("TLS needs both --tls-cert and --tls-key")
    pair = (read_file(key, OPTION_NAMES.of(OPTION_NAMES.key, key)),
            read_file(cert, OPTION_NAMES.of(OPTION_NAMES.cert, cert)))
    root = read_file(ca, OPTION_NAMES.of(OPTION_NAMES.ca, ca)) if ca else None
    return grpc.ssl_server_credentials([pair], root_certificates=root, require_client_auth=root is not None)


class TokenInterceptor(grpc.aio.ServerInterceptor):
    """Refuses every call without the service's bearer token (current, or previous within its
    grace after a rotation: :mod:`.token_source`), except health checks."""

    def __init__(self, tokens: TokenSource) -> None:
        self._tokens = tokens

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or handler_call_details.method.startswith(HEALTH_PREFIX):
            return handler
        given = dict(handler_call_details.invocation_metadata or ()).get(METADATA_KEY, "")
        scheme, _, token = given.partition(" ")
        if scheme == "Bearer" and self._tokens.accepts(token):
            return handler
        reason = ("missing bearer token: pass --token-file or set P2_TOKEN / P2_TOKEN_FILE" if not given
                  else "wrong bearer token")
        return refusal(handler, grpc.StatusCode.UNAUTHENTICATED, reason)


def refusal(handler: grpc.RpcMethodHandler, code: grpc.StatusCode, reason: str,
            trailing_metadata: tuple[tuple[str, str], ...] = ()) -> grpc.RpcMethodHandler:
    """A handler that answers ``code`` without reading the request.

    It is request-streaming whatever the method is (one message on the wire is
    the same either way): grpc reads a streaming request only when the handler
    iterates it, and this one never does, so a 75 MiB body is neither buffered
    nor decoded (a unary handler would have it read and decoded first, and a
    decode error would answer UNKNOWN with a traceback logged)."""
    async def refuse(request_iterator, context):
        await context.abort(code, reason, trailing_metadata)

    async def refuse_stream(request_iterator, context):
        await context.abort(code, reason, trailing_metadata)
        yield  # pragma: no cover - an async generator that never yields

    if handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(refuse_stream, request_deserializer=None,
                                                     response_serializer=handler.response_serializer)
    return grpc.stream_unary_rpc_method_handler(refuse, request_deserializer=None,
                                                response_serializer=handler.response_serializer)
