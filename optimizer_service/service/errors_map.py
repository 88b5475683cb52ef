"""Errors to gRPC status codes, in one place."""

from __future__ import annotations

import grpc

from optimizer_service.errors import InvalidInputError
from optimizer_service.service.errors import NotFoundError, RefusedError
from optimizer_service.service.store.base import StoreConflictError, StoreError, StoreUnavailableError


def status_of(error: Exception) -> grpc.StatusCode | None:
    """The status for an error a client may see; ``None``: a bug (INTERNAL, logged)."""
    if isinstance(error, NotFoundError):
        return grpc.StatusCode.NOT_FOUND
    if isinstance(error, RefusedError):
        return grpc.StatusCode.FAILED_PRECONDITION
    if isinstance(error, StoreUnavailableError):
        return grpc.StatusCode.UNAVAILABLE
    if isinstance(error, StoreConflictError):
        return grpc.StatusCode.ABORTED
    if isinstance(error, InvalidInputError):
        return grpc.StatusCode.INVALID_ARGUMENT
    if isinstance(error, StoreError):
        return grpc.StatusCode.UNAVAILABLE
    return None


def one_line(error: Exception) -> str:
    return " ".join(str(error).split()) or type(error).__name__
