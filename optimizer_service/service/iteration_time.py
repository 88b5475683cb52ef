"""A job's measured iteration time: one figure, the replanning policy's.

The replanning policy measures the plan a job runs with a
:class:`~optimizer_service.control.policy_state.Measurement`: the median of its
last ``window`` iterations past the ``warmup`` ones that follow a switch, once
``min_samples`` of them exist (:class:`~optimizer_service.control.policy.PolicyConfig`;
a cluster change starts it over). The dashboard, the Prometheus metrics
(``p2_prediction_error_ratio``) and the plan records show that figure and no
other (:meth:`ServiceCore.iteration_time`). A job the service does not replan
(``p2 serve --no-replan``) has no policy: :func:`of_history` measures it with the
same ``Measurement`` over the same iterations.
"""

from __future__ import annotations

import math
from collections.abc import Reversible
from dataclasses import dataclass

from optimizer_service.control.policy import Policy, PolicyConfig
from optimizer_service.control.policy_state import Measurement
from optimizer_service.service.live import JobIteration


@dataclass(frozen=True)
class IterationTime:
    """The measured iteration time of plan ``version`` (0: passthrough): the median of
    ``iterations`` iterations, None until ``min_samples`` were measured."""

    version: int
    seconds: float | None
    iterations: int


def of_policy(policy: Policy) -> IterationTime:
    """What the job's policy measures of the plan it runs."""
    return IterationTime(policy.running, policy.median_seconds(), len(policy.measurement.window))


def of_history(history: Reversible[JobIteration], config: PolicyConfig) -> IterationTime:
    """What a policy would measure of the plan a job runs, from the job's iterations
    (oldest first): the iterations since the newest one's plan started running, as
    many as a measurement's window reaches back (``warmup`` + ``window``), go
    through a fresh :class:`Measurement` in order. Iterations a policy skips (a time
    that is not finite and positive) do not count."""
    usable = (it for it in reversed(history)
              if math.isfinite(it.seconds) and it.seconds > 0 and math.isfinite(it.wait_seconds))
    newest = next(usable, None)
    if newest is None:
        return IterationTime(0, None, 0)
    run = [newest]
    for it in usable:
        if it.version != newest.version or len(run) == config.warmup + config.window:
            break
        run.append(it)
    measurement = Measurement()
    for it in reversed(run):
        measurement = measurement.add(it.seconds, it.wait_seconds, it.channels, config)
    return IterationTime(newest.version, measurement.median_seconds(config.min_samples), len(measurement.window))
