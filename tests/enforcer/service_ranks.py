"""Ranks of the service-link tests: a training loop linked to a service (imported by spawned ranks).

Importing this module (which a spawned rank does before it joins the world)
captures the ``enforcer`` logger's records, so lines the link logs while the
world is being made are seen too.
"""

from __future__ import annotations

import logging
import time

import torch
import torch.distributed as dist

import enforcer
from tests.enforcer.plan_ranks import run_ops


class _Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((record.levelname, record.getMessage()))


CAPTURED = _Captured()
logging.getLogger("enforcer").addHandler(CAPTURED)
logging.getLogger("enforcer").setLevel(logging.INFO)


def _everyone(flag: bool, group) -> bool:
    """Whether ``flag`` holds on every rank (a MIN on ``group``: the same answer everywhere)."""
    value = torch.tensor([1 if flag else 0])
    dist.all_reduce(value, op=dist.ReduceOp.MIN, group=group)
    return bool(value.item())


def train(until: str, version: int = 0, iterations: int = 0, pause: float = 0.0, after: int = 3,
          max_iterations: int = 400) -> dict:
    """The six planned ops per iteration (:func:`tests.enforcer.plan_ranks.run_ops`) on the
    enforcer, compared with the same ops on plain gloo, then ``enforcer.step()``.

    ``until``: ``"iterations"`` (a fixed number), ``"running"`` (every rank runs
    ``version``), ``"planned"`` (every rank runs a plan the service committed, any version), ``"aborted"`` (every rank got the Abort of ``version``) or
    ``"settled"`` (every rank either runs ``version`` or got its Abort); then
    ``after`` more iterations. Every stop is decided collectively (on the plain
    group), so all ranks run the same iterations whatever they heard."""
    plain = dist.new_group(backend="gloo")
    link = enforcer.group_of().link
    mismatches, iteration, remaining = [], 0, None
    started = time.perf_counter()
    while True:
        got, want = run_ops(None, True), run_ops(plain, True)
        mismatches += [(iteration, i) for i, (g, w) in enumerate(zip(got, want)) if not torch.equal(g, w)]
        enforcer.step()
        iteration += 1
        if pause:
            time.sleep(pause)
        if remaining is None:
            if until == "iterations":
                done = iteration >= iterations
            elif until == "running":
                done = _everyone(link.session.running == version, plain)
            elif until == "planned":
                done = _everyone(link.session.running > 0, plain)
            else:
                aborted = any(": got Abort(" in line and f" v{version} " in line for line in link.stream.history)
                settled = aborted or (until == "settled" and link.session.running == version)
                done = _everyone(settled, plain)
            if done or iteration >= max_iterations:
                remaining = after
        if remaining is not None:
            if remaining == 0:
                break
            remaining -= 1
    trace = enforcer.trace()
    enforced = sorted({op["iteration"] for op in trace["ops"] if op["enforced"]})
    planned_after = [op["enforced"] for op in trace["ops"] if enforced and op["iteration"] >= enforced[0]]
    return {"mismatches": mismatches, "iterations": iteration, "seconds": time.perf_counter() - started,
            "running": link.session.running, "switches": trace["switches"],
            "first_enforced": enforced[0] if enforced else None, "all_enforced_after": all(planned_after),
            "enforced": sum(1 for op in trace["ops"] if op["enforced"]), "history": list(link.stream.history),
            "attempts": link.stream.attempts, "connected": link.stream.connected, "bypassed": trace["bypassed"],
            "log": list(CAPTURED.lines)}
