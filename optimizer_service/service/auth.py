"""Who may talk to the service: a bearer token, and optional (mutual) TLS.

With a token configured, every RPC except the standard health check
(Kubernetes probes send no metadata) must carry ``authorization: Bearer
TOKEN``; others are refused with UNAUTHENTICATED and one line, from the call's
metadata alone: the refusal never reads the request, so a caller without the
token cannot make the service buffer or decode a byte of its body. TLS is
configured from PEM files; with a CA file the service also requires and
checks client certificates (mutual TLS).
"""

from __future__ import annotations

import hmac
from pathlib import Path

import grpc

from optimizer_service.errors import InvalidInputError

HEALTH_PREFIX = "/grpc.health.v1.Health/"
METADATA_KEY = "authorization"


class AuthSetupError(InvalidInputError):
    """A token or certificate file that cannot be used."""


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
    """The token in ``path`` (surrounding whitespace stripped); one line if it cannot be."""
    try:
        token = Path(path).read_text().strip()
    except OSError as error:
        raise AuthSetupError(f"cannot read the token file {path}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise AuthSetupError(f"the token file {path} is not text") from None
    if not token or any(c.isspace() for c in token):
        raise AuthSetupError(f"the token file {path} must hold one token (no spaces), got "
                             f"{'nothing' if not token else 'several words'}")
    return check_token(token, f"the token file {path}")


def _read(path: str | Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as error:
        raise AuthSetupError(f"cannot read the {what} {path}: {error.strerror}") from None


def server_credentials(cert: str | None, key: str | None, ca: str | None) -> grpc.ServerCredentials | None:
    """TLS credentials from PEM files (``None`` without a certificate); mutual TLS with ``ca``."""
    if not cert and not key and not ca:
        return None
    if not cert or not key:
        raise AuthSetupError("TLS needs both --tls-cert and --tls-key")
    pair = (_read(key, "TLS key"), _read(cert, "TLS certificate"))
    root = _read(ca, "TLS CA certificate") if ca else None
    return grpc.ssl_server_credentials([pair], root_certificates=root, require_client_auth=root is not None)


def channel_credentials(ca: str | None, cert: str | None = None, key: str | None = None) -> grpc.ChannelCredentials:
    """Client TLS credentials: trust ``ca`` (default: the system's roots); a client
    certificate and key for mutual TLS."""
    if bool(cert) != bool(key):
        raise AuthSetupError("a client certificate needs its key too (--tls-cert and --tls-key)")
    return grpc.ssl_channel_credentials(root_certificates=_read(ca, "TLS CA certificate") if ca else None,
                                        private_key=_read(key, "TLS key") if key else None,
                                        certificate_chain=_read(cert, "TLS certificate") if cert else None)


def bearer(token: str | None) -> list[tuple[str, str]]:
    """The call metadata that carries ``token``."""
    return [(METADATA_KEY, f"Bearer {token}")] if token else []


class TokenInterceptor(grpc.aio.ServerInterceptor):
    """Refuses every call without the service's bearer token, except health checks."""

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or handler_call_details.method.startswith(HEALTH_PREFIX):
            return handler
        given = dict(handler_call_details.invocation_metadata or ()).get(METADATA_KEY, "")
        if hmac.compare_digest(given.encode(), self._expected):
            return handler
        reason = ("missing bearer token: pass --token-file or set P2_TOKEN / P2_TOKEN_FILE" if not given
                  else "wrong bearer token")
        return _refusal(handler, reason)


def _refusal(handler: grpc.RpcMethodHandler, reason: str) -> grpc.RpcMethodHandler:
    """A handler that answers UNAUTHENTICATED without reading the request.

    It is request-streaming whatever the method is (one message on the wire is
    the same either way): grpc reads a streaming request only when the handler
    iterates it, and this one never does, so a 75 MiB body is neither buffered
    nor decoded (a unary handler would have it read and decoded first, and a
    decode error would answer UNKNOWN with a traceback logged)."""
    async def refuse(request_iterator, context):
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, reason)

    async def refuse_stream(request_iterator, context):
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, reason)
        yield  # pragma: no cover - an async generator that never yields

    if handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(refuse_stream, request_deserializer=None,
                                                     response_serializer=handler.response_serializer)
    return grpc.stream_unary_rpc_method_handler(refuse, request_deserializer=None,
                                                response_serializer=handler.response_serializer)
