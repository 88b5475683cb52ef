"""Syndicate's MCMC search over execution plans (Pseudocode 1, §4.3.1).

The state is one option per comm-op (:class:`optimizer_service.syndicate.problem.Problem`);
its cost is the iteration time the scheduler gives it. Starting from the
greedy plan (every op on its fastest option alone), each step picks a comm-op
uniformly at random, gives it a uniformly random *other* option, prices the
result with the scheduler, and accepts it by Metropolis–Hastings: always when
it is no worse, else with probability ``exp(-β·ΔC/C)``. The proposal is
symmetric, so this is the Metropolis rule; ``β`` (:data:`BETA`) sets how often
a worse plan is kept — with β = 100 a plan 1 % slower is accepted 37 % of the
time, 5 % slower under 1 % — "a greedy search with an ability to escape local
minima". The best plan seen is returned, so the result is never worse than
the start.

Termination (§4.3.1): at the time budget, or when the search "does not find a
better joint optimizer plan for more than half of the total elapsed search
time". Our reading counts that time in evaluations — more than half of all
evaluations so far came after the last improvement — so a run is exactly
reproducible for a seed whenever the budget is not what stopped it; the rule
applies only after ``min_evaluations``, since at the very start every search
has "not improved for most of its time". Its default (:func:`default_floor`)
gives every option of every op about ten proposals (10 per option in all; the
eight ops of a DLRM have ~650 options), at least 20 per comm-op and 1000 in
all, but no more than 20,000 unless 20 per op needs more, so a 500-op DAG still
converges in seconds. ``max_evaluations`` bounds the work independently of the
clock.

**Restarts** (:func:`restarted`; our addition, not in the paper): the chain
from the greedy plan, then :data:`RESTARTS` more chains, each from a plan drawn
uniformly at random (from the seed), each until its own no-improvement rule;
the best plan of all is returned, and the time budget and ``max_evaluations``
are shared. The greedy plan is the paper's start, and single-op proposals
cannot leave a basin whose every neighbour is more than a few per cent slower:
on the first live searches of two DDP loop runs the greedy chain, with every
seed, stopped in a plan that sends two of three all-reduces flat over the
second NIC (103.6 and 111.5 ms by the search's own model), while chains from
random plans found hierarchical plans (89.0 and 98.3 ms, in 11 of 12 chains)
like the one a third run's greedy chain had found, which measured 0.085 s
against the flat plan's 0.111 s.

**Ties** (``tiebreak``; our addition): the cost may be one that many plans
share to the last bit — the live loop's first search prices every motif at the
worst of several readings of its window
(:mod:`optimizer_service.syndicate.live_search`), and where one reading's
critical path decides, plans that differ off it cost the same. A chain keeps
the first plan it meets at its best cost; given ``keep_ties``, it also keeps
up to that many other plans it accepts at that cost (within :data:`TIE`,
relative; a tie is no improvement for the stopping rule), and
:func:`restarted` hands the tied plans of every chain whose best ties the
least to ``tiebreak``, which picks one. Why: in a DDP loop run, four different
first plans of four runs cost 91.86 ms each by the worst of three readings of
one window; the search kept the first it met, which the window's fit priced at
105.3 ms (at the load it puts on the host) against 102.2 ms for two of the
others. Run alone it measured 0.090 s; the next run's plan, one of those two,
0.078 s.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from optimizer_service.errors import InvalidInputError
from optimizer_service.syndicate.options import Option
from optimizer_service.syndicate.problem import Problem
from optimizer_service.syndicate.scheduler import Policy

BETA = 100.0

#: Costs within this fraction of each other are a tie (module docstring, "Ties"): float sums in
#: another order, not a difference a model could mean.
TIE = 1e-9

#: Tied plans a chain keeps for ``tiebreak`` (module docstring, "Ties").
TIES = 32

#: ``tiebreak(problem, plans, policy, framework_order)``: the index of the plan to take among ``plans``,
#: which ``problem`` prices the same (the first: the plan the search would take without it).
TieBreak = Callable[[Problem, Sequence[tuple[int, ...]], Policy, bool], int]


def default_floor(problem: Problem) -> int:
    """Evaluations before the no-improvement rule may stop a search (module docstring)."""
    per_op = max(1000, 20 * len(problem.comm_nodes))
    return max(per_op, min(10 * sum(len(options) for options in problem.options), max(20_000, per_op)))


@dataclass(frozen=True)
class SearchResult:
    choice: tuple[int, ...]
    seconds: float                 # the best plan's iteration time
    start_seconds: float           # the starting plan's
    evaluations: int
    accepted: int
    elapsed: float
    stopped_by: str                # "no-improvement", "budget" or "evaluations"
    improvements: tuple[tuple[int, float], ...]   # (evaluation, best seconds) each time the best improved
    tied: tuple[tuple[int, ...], ...] = ()        # other plans met at the best's cost (``keep_ties``)


def _tied(cost: float, best: float) -> bool:
    return abs(cost - best) <= TIE * abs(best)


def mcmc(problem: Problem, start: Sequence[int], *, policy: Policy = Policy.CRITICAL_PATH,
         framework_order: bool = False, allowed: Callable[[Option], bool] = lambda o: True,
         budget: float = 10.0, seed: int = 0, beta: float = BETA, min_evaluations: int | None = None,
         max_evaluations: int | None = None, clock: Callable[[], float] = time.perf_counter,
         progress: Callable[[int, float], None] | None = None, keep_ties: int = 0) -> SearchResult:
    """Search from ``start`` (module docstring); ``allowed`` restricts the options; ``keep_ties``:
    how many other plans of the best's cost to keep (module docstring, "Ties")."""
    if budget <= 0:
        raise InvalidInputError(f"search budget {budget} s must be > 0")
    rng = random.Random(seed)
    choices = [[k for k, option in enumerate(options) if allowed(option)] for options in problem.options]
    movable = [i for i, ks in enumerate(choices) if len(ks) > 1]
    current = list(start)
    cost = problem.cost_of(current, policy, framework_order)
    best, best_cost = list(current), cost
    tied: dict[tuple[int, ...], None] = {}          # in the order met
    floor = min_evaluations if min_evaluations is not None else default_floor(problem)
    evaluations = accepted = 0
    last_improvement = 0
    improvements = [(0, cost)]
    began = clock()
    stopped_by = "no-improvement"
    while movable:
        if clock() - began >= budget:
            stopped_by = "budget"
            break
        if max_evaluations is not None and evaluations >= max_evaluations:
            stopped_by = "evaluations"
            break
        if evaluations >= floor and evaluations - last_improvement > evaluations / 2:
            break
        op = movable[rng.randrange(len(movable))]
        options = choices[op]
        previous = current[op]
        if previous in options:                     # uniformly among the other options
            draw = rng.randrange(len(options) - 1)
            proposal = options[draw if draw < options.index(previous) else draw + 1]
        else:
            proposal = options[rng.randrange(len(options))]
        current[op] = proposal
        new_cost = problem.cost_of(current, policy, framework_order)
        evaluations += 1
        if new_cost <= cost or rng.random() < math.exp(-beta * (new_cost - cost) / cost):
            cost = new_cost
            accepted += 1
            if cost < best_cost - 1e-15 and not (keep_ties and _tied(cost, best_cost)):
                best, best_cost, tied = list(current), cost, {}
                last_improvement = evaluations
                improvements.append((evaluations, cost))
                if progress is not None:
                    progress(evaluations, cost)
            elif len(tied) < keep_ties and _tied(cost, best_cost) and current != best:
                tied.setdefault(tuple(current))
        else:
            current[op] = previous
    return SearchResult(tuple(best), best_cost, improvements[0][1], evaluations, accepted, clock() - began,
                        stopped_by, tuple(improvements), tuple(tied))


#: Chains :func:`restarted` runs after the greedy one, each from a random plan (module docstring).
RESTARTS = 4


def restarted(problem: Problem, start: Sequence[int], *, restarts: int = RESTARTS, seed: int = 0,
              allowed: Callable[[Option], bool] = lambda o: True, budget: float = 10.0,
              max_evaluations: int | None = None, clock: Callable[[], float] = time.perf_counter,
              tiebreak: TieBreak | None = None, **chain) -> SearchResult:
    """:func:`mcmc` from ``start`` and from ``restarts`` random plans (module docstring, "Restarts"):
    the best plan found, with the evaluations and accepted moves of all chains; ``stopped_by`` is
    ``no-improvement`` when every chain stopped so, else what cut a chain short. ``tiebreak``
    picks the plan among the best plans of the chains whose best ties the least and the plans
    they met at that cost (module docstring, "Ties"); without it, the first chain's is taken."""
    if restarts < 0:
        raise InvalidInputError(f"restarts {restarts} must be >= 0")
    rng = random.Random(f"restarts {seed}")
    choices = [[k for k, option in enumerate(options) if allowed(option)] for options in problem.options]
    starts = [list(start)] + [[ks[rng.randrange(len(ks))] if ks else start[op] for op, ks in enumerate(choices)]
                              for _ in range(restarts)]
    began, chains, spent = clock(), [], 0
    for k, first in enumerate(starts):
        left = budget - (clock() - began)
        if chains and (left <= 0 or (max_evaluations is not None and spent >= max_evaluations)):
            break
        found = mcmc(problem, first, seed=seed + k, allowed=allowed, budget=left if chains else budget, clock=clock,
                     max_evaluations=None if max_evaluations is None else max_evaluations - spent,
                     keep_ties=TIES if tiebreak is not None else 0, **chain)
        chains.append((found, spent))
        spent += found.evaluations
    best, before = min(chains, key=lambda item: item[0].seconds)
    if tiebreak is not None:
        candidates = list(dict.fromkeys((best.choice, *(plan for found, _ in chains if _tied(found.seconds, best.seconds)
                                                        for plan in (found.choice, *found.tied)))))
        if len(candidates) > 1:
            picked = tiebreak(problem, candidates, chain.get("policy", Policy.CRITICAL_PATH),
                              chain.get("framework_order", False))
            best = replace(best, choice=candidates[picked])
    stopped = next((found.stopped_by for found, _ in chains if found.stopped_by != "no-improvement"), "no-improvement")
    return replace(best, start_seconds=chains[0][0].start_seconds, evaluations=spent,
                   accepted=sum(found.accepted for found, _ in chains), elapsed=clock() - began, stopped_by=stopped,
                   improvements=tuple((evaluation + before, seconds) for evaluation, seconds in best.improvements))

