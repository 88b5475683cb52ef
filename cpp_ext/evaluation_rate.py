"""Evaluations per second of ``Problem.cost_of``, Python against C++, on the
DAGs of ``benchmarks/optimize.py``'s speed section: ``fsdp`` with 40 layers
(200 nodes) and with 167 layers (501 comm-ops), under random one-op changes
from the greedy plan; then the MCMC search on the 501-op DAG (10 s budget).

    .venv/bin/python cpp_ext/evaluation_rate.py [--window SECONDS]

A measurement, not a test: it prints and asserts nothing.
"""

from __future__ import annotations

import argparse
import random
import time

from optimizer_service.catalog import load_topology
from optimizer_service.evaluation import Problem
from optimizer_service.motif_cost import MotifCostModel
from optimizer_service.scheduler import Policy
from optimizer_service.search import mcmc
from optimizer_service.workloads import fsdp


def rate(price, problem: Problem, policy: Policy, window: float, seed: int = 0) -> float:
    choice, rng = problem.greedy(), random.Random(seed)
    count, began = 0, time.perf_counter()
    while time.perf_counter() - began < window:
        k = rng.randrange(len(choice))
        choice[k] = rng.randrange(len(problem.options[k]))
        price(choice, policy)
        count += 1
    return count / (time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=2.0, help="seconds per measurement")
    window = parser.parse_args().window
    cost = MotifCostModel(load_topology("hgx2-4n"))
    for layers in (40, 167):
        problem = Problem(fsdp(32, layers=layers), cost)
        if problem.compiled is None:
            raise SystemExit("the C++ extension is not built (or P2_PURE_PYTHON=1): nothing to compare")
        tasks = problem.graph(problem.greedy(), False)[0].size
        print(f"fsdp {layers} layers: {len(problem.dag.nodes)} nodes, {len(problem.comm_nodes)} comm-ops, "
              f"{tasks} tasks (greedy)")
        for policy in Policy:
            python = rate(problem.python_cost_of, problem, policy, window)
            native = rate(problem.cost_of, problem, policy, window)
            print(f"  {policy.value:<14} python {python:8.0f}/s   C++ {native:8.0f}/s   x{native / python:.0f}")
    result = mcmc(problem, problem.greedy(), budget=10.0, seed=0)
    print(f"mcmc on the {len(problem.comm_nodes)}-op DAG: stopped by {result.stopped_by} after "
          f"{result.evaluations} evaluations in {result.elapsed:.2f} s "
          f"({result.evaluations / result.elapsed:.0f}/s), {result.start_seconds * 1e3:.3f} -> "
          f"{result.seconds * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
