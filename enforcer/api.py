"""What training scripts and the service call: iteration steps, traces, plans, counters."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from enforcer import groups, state
from enforcer.group.core import group_of  # noqa: F401 — re-exported by the package
from enforcer.link import switching
from enforcer.trace import trace_path
from optimizer_service.metrics import enforcer_exposition
from optimizer_service.plan import InvalidInputError

log = logging.getLogger("enforcer")


def step() -> int:
    """Mark an iteration boundary (call after ``optimizer.step()``); returns the new iteration.

    With ``P2_SERVICE`` this is also where the rank reports the iteration to the
    service and, every ``P2_SWITCH_EVERY`` iterations, where all ranks agree on
    the plan to run next (:mod:`enforcer.link.switching`): collective, like the ops."""
    iteration = state.tracer().step()
    live = groups.live().values()
    for group in live:
        if group.runtime is not None:
            group.runtime.step()
    for group in live:
        if group.link is not None:
            group.link.iteration_done(iteration - 1)
            switching.at_boundary(group, group.link.session, iteration)
    return iteration


@contextmanager
def idle() -> Iterator[None]:
    """The training loop is idle inside this block, between two iterations (after :func:`step`,
    before the next iteration's first op): paused by its launcher, say, while another job runs.

    The enforcer leaves that time out of what it measures: the next iteration's telemetry
    (its duration), the compute before its first op (the trace's
    ``gap``, which the optimizer's search reads as compute) and its CPU record. Without it a
    pause would read as one iteration of that much compute. A no-op without a ``p2enforcer``
    group."""
    if not groups.live():
        yield
        return
    tracer = state.tracer()
    started = tracer.now()
    try:
        yield
    finally:
        tracer.idle(started, tracer.now())


def attach(optimizer) -> None:
    """Call :func:`step` after every ``optimizer.step()`` (a post-step hook)."""
    optimizer.register_step_post_hook(lambda *_: step())


def plan_version(group=None) -> int:
    """The version of the plan ``group`` (default: the world) runs now; 0 in
    passthrough or when the group is not a p2enforcer group."""
    ours = group_of(group)
    runtime = None if ours is None else ours.runtime
    return 0 if runtime is None else runtime.plan.version


def trace() -> dict:
    """This rank's trace as a dict (see :mod:`enforcer.trace`)."""
    return state.tracer().to_dict()


def export_trace(path: str | os.PathLike | None = None) -> Path:
    """Write this rank's trace as JSON to ``path`` (default: ``P2_TRACE_FILE``)."""
    tracer = state.tracer()
    if path is None:
        template = state.settings().trace_file
        if not template:
            raise InvalidInputError("no trace path: pass one or set P2_TRACE_FILE (may contain {rank})")
        path = trace_path(template, tracer.rank)
    return tracer.export(path)


def bypass_counts() -> dict[str, int]:
    """Ops that reached an enforcer group's inner backend without the enforcer, by op."""
    return dict(state.tracer().bypassed)


def metrics_text() -> str:
    """This rank's counters in the Prometheus text format (names and units:
    :mod:`optimizer_service.metrics`)."""
    tracer = state.tracer()
    return enforcer_exposition(tracer.rank, tracer.counts, tracer.bypassed, tracer.wait_seconds())


def _enforcer_group(group):
    ours = group_of(group)
    if ours is None:
        raise InvalidInputError("plans are installed on a p2enforcer process group; "
                                'init_process_group(backend="p2enforcer") first')
    return ours


def install_plan(plan, group=None) -> None:
    """Install ``plan`` (a :class:`optimizer_service.plan.op_plan.Plan`, its JSON text, or a path)
    on ``group`` (default: the world). Collective: every rank of the group calls
    it at the same point between iterations. Raises ``PlanError`` and leaves the
    group in its current mode when the plan does not fit the job."""
    from enforcer.runtime.plan_file import install
    install(_enforcer_group(group), plan)


def remove_plan(group=None) -> None:
    """Back to passthrough (collective, like :func:`install_plan`)."""
    _enforcer_group(group).replace_runtime(None)
