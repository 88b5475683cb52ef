"""Errors, in one place, for everything a user can get wrong.

Every error a user can cause is an :class:`InvalidInputError` (or one of its
subclasses) whose message is one readable line naming the bad value and, where
possible, how to fix it. The shell (the CLI, later gRPC) maps it to exit code
2 / INVALID_ARGUMENT in one place; nothing in the core prints or exits.
"""

from __future__ import annotations


class InvalidInputError(ValueError):
    """A request the planner cannot serve because its input is wrong."""


class SearchBoundError(InvalidInputError):
    """The requested search would exceed a configured bound (placements,
    synthesis devices, program size, search states)."""


class PlanError(InvalidInputError):
    """A plan that cannot be installed; the message is one line naming the problem."""


class LayoutError(InvalidInputError):
    """A lowered program whose steps do not fit the data the devices hold
    (so it has no executable data layout)."""


class JobFailedError(RuntimeError):
    """Valid input, but the work it started failed (a rank of a measurement job
    exited with an error). The CLI reports it in one line with exit code 1."""
