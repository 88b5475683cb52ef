"""Syndicate and the baselines it is compared with (§6.4), all in one simulator.

Every system is a choice of execution-plan options, a scheduling policy
(:mod:`optimizer_service.syndicate.scheduler`) and whether the training loop's program
order binds (``framework_order``, :mod:`optimizer_service.syndicate.dag`):

=========  ===============================================  ============  ===============
system     options                                          order         program order
=========  ===============================================  ============  ===============
FIFO       greedy, channel 0, unsplined (today's stack)     FIFO          kept
BS+        as FIFO, oracle segment size                     LIFO          kept
HO         greedy, channel 0                                critical path kept
S-Exec     MCMC over all options and channels               FIFO          kept
S-Sched    as FIFO, oracle segment size                     critical path dropped
Syndicate  MCMC over all options and channels               critical path dropped
=========  ===============================================  ============  ===============

Readings where §6.4 leaves room:

* "greedy" is each op's fastest option when it runs alone; on channel 0 only
  for the systems built on today's stack, which runs one comm-op at a time
  over one set of communicators ("interfaces therein only permit
  one-at-a-time execution of comm-ops with greedy execution plan").
* Today's stack picks among an all-reduce's algorithms (NCCL's ring and tree
  are "available out-of-the-box") but runs an all-to-all whole: splining is
  Syndicate's. FIFO, BS+ and S-Sched get the whole all-to-all (§6.5: S-Sched
  is "handicapped" with the default all-to-all plan); HO adds "greedy
  execution planning for a2a", so its all-to-alls may be splined.
* ByteScheduler tunes one partition size for the whole job; BS+'s "oracle
  that optimally segments tensors" is therefore the best of the uniform
  segment counts :data:`optimizer_service.syndicate.options.SEGMENTS` applied to every
  op's greedy decomposition, judged by the resulting iteration time. S-Sched
  gets the same oracle ("the benefit of the segment oracle").
* HO is hand-optimised *ordering*: critical-path priority among the ops the
  framework has submitted, but no cross-iteration moves (those need
  Syndicate's enforcer, §6.5).
* S-Exec and Syndicate each get the whole ``budget``.

Every system is priced both ways of :mod:`optimizer_service.syndicate.problem`: the
two-iteration figure the search minimises, and the steady state a running job
sees (the paper's measurements).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from optimizer_service.errors import InvalidInputError
from optimizer_service.syndicate.mcmc import SearchResult, restarted
from optimizer_service.syndicate.options import SEGMENTS, Option
from optimizer_service.syndicate.problem import Evaluation, Problem
from optimizer_service.syndicate.scheduler import Policy

SYSTEMS = ("FIFO", "BS+", "HO", "S-Exec", "S-Sched", "Syndicate")


@dataclass(frozen=True)
class SystemResult:
    name: str
    choice: tuple[int, ...]
    policy: Policy
    framework_order: bool
    evaluation: Evaluation
    search: SearchResult | None = None
    steady_seconds: float = 0.0     # per iteration once running (Problem.steady_seconds)

    @property
    def seconds(self) -> float:
        return self.evaluation.seconds


def channel_zero(option: Option) -> bool:
    return option.channel == "ch0"


def library_default(option: Option) -> bool:
    """What today's stack can run: channel 0, and no splined pattern."""
    return channel_zero(option) and not option.base.startswith("spline") and option.base != "halves"


def segment_oracle(problem: Problem, greedy: list[int], policy: Policy, framework_order: bool) -> list[int]:
    """The uniform segment count (applied to every op's greedy option, channel 0)
    that gives the shortest iteration."""
    position = [{o.name: i for i, o in enumerate(options)} for options in problem.options]
    best: tuple[float, int, list[int]] | None = None
    for k in SEGMENTS:
        choice = []
        for op, index in enumerate(greedy):
            wanted = f"{problem.options[op][index].base}{f'/seg{k}' if k > 1 else ''}@ch0"
            choice.append(position[op].get(wanted, index))
        seconds = problem.cost_of(choice, policy, framework_order)
        if best is None or seconds < best[0]:
            best = (seconds, k, choice)
    assert best is not None
    return best[2]


def run_systems(problem: Problem, budget: float = 10.0, seed: int = 0, names=SYSTEMS,
                progress: Callable[[str], None] | None = None, **search) -> list[SystemResult]:
    """Every system of ``names`` on ``problem`` (module docstring), in that order."""
    greedy_stack = problem.greedy(library_default)
    greedy_zero = problem.greedy(channel_zero)
    greedy_all = problem.greedy()
    results = []
    for name in names:
        if progress is not None:
            progress(name)
        found = None
        if name == "FIFO":
            choice, policy, keep = greedy_stack, Policy.FIFO, True
        elif name == "BS+":
            policy, keep = Policy.LIFO, True
            choice = segment_oracle(problem, greedy_stack, policy, keep)
        elif name == "HO":
            choice, policy, keep = greedy_zero, Policy.CRITICAL_PATH, True
        elif name == "S-Sched":
            policy, keep = Policy.CRITICAL_PATH, False
            choice = segment_oracle(problem, greedy_stack, policy, keep)
        elif name in ("S-Exec", "Syndicate"):
            policy, keep = (Policy.FIFO, True) if name == "S-Exec" else (Policy.CRITICAL_PATH, False)
            found = restarted(problem, greedy_all, policy=policy, framework_order=keep, budget=budget, seed=seed,
                         **search)
            choice = list(found.choice)
        else:
            raise InvalidInputError(f"unknown system {name!r}; expected one of {', '.join(SYSTEMS)}")
        results.append(SystemResult(name, tuple(choice), policy, keep, problem.evaluate(choice, policy, keep),
                                    found, problem.steady_seconds(choice, policy, keep)))
    return results
