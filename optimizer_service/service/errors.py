"""The errors the service core raises besides a malformed request's
(:class:`~optimizer_service.service.requests.RequestError`); their status codes
are in :mod:`optimizer_service.service.errors_map`."""

from __future__ import annotations

from optimizer_service.errors import InvalidInputError


class NotFoundError(InvalidInputError):
    """A job or plan the request names does not exist (NOT_FOUND)."""


class RefusedError(InvalidInputError):
    """The request is well formed but cannot be served now (FAILED_PRECONDITION)."""
