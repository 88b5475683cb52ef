"""Syndicate's joint optimizer in simulation: speedups, qualitative findings, search speed.

On the ``hgx2-4n`` preset (4 nodes x 8 GPUs, two channels) four sections are
measured and reported, never asserted:

* **systems** — every built-in workload under all six systems of
  :mod:`optimizer_service.syndicate.baselines` (``run_systems``, ``--budget`` seconds of
  MCMC for S-Exec and Syndicate): iteration time, compute idle fraction,
  speedups over BS+ and FIFO, and Syndicate's option per comm-op; each both
  for the two-iteration time the search minimises and for the steady state
  (``Problem.steady_seconds``, what the paper measures). Goals: DLRM rows
  Syndicate >= 1.2x BS+ and >= 1.3x FIFO; ``cnn-dp`` within 3 % of BS+.
* **findings** — (a) a 32-rank all-reduce from 4 KiB to 1 GiB: each option
  family's time alone (ring/tree unsegmented on ch0; P² programs beside them)
  and the winner per size (paper: tree small, ring large); (b) a 32-rank
  all-to-all from 1 KiB to 64 MiB per destination block: the fastest spline
  width alone on ch0, and Syndicate's pick for the DLRM all-to-alls; (c) in
  Syndicate's DLRM plans, the channels of all-to-alls and all-reduces, the
  seconds each kind is busy on each channel, and the seconds per iteration in
  which both run at once on different channels; (d) Figure 18's comparison:
  Syndicate's search with every all-to-all and all-reduce bound to one channel
  each (a2a on ch1 + AR on ch0, the paper's choice; the reverse; both on ch0)
  and free per motif; (e) the same bindings as a microbenchmark: one
  all-to-all (256 KiB blocks) issued beside one all-reduce of 1 MiB … 1 GiB,
  each binding's best plan found exhaustively — which binding wins as the
  all-reduce grows relative to the all-to-all.
* **speed** — (a) ``fsdp`` with 40 layers (200 nodes): evaluations per second
  of ``Problem.cost_of`` under random one-op changes (goal >= 2,000/s), per
  scheduling policy, on the C++ path and on the pure-Python one
  (``Problem.python_cost_of``) and their ratio; (b) ``fsdp`` with 167 layers (501 comm-ops): ``Problem``
  construction and MCMC from the greedy plan (60 s budget): when it stopped,
  why, and when its final best was found (goal: converged within 10 s).

Writes ``optimize.json`` and ``optimize.png`` under ``--out`` and prints a summary.
``--compute-slowdown S`` is a what-if: the same run where channel 0's motifs
(NCCL's GPU kernels) make compute take ``1 + S`` times as long (scheduler
"Interference"; no preset sets it), written to
``optimize-compute-slowdown-S.{json,png}``.

    .venv/bin/python benchmarks/optimize.py [--budget 5] [--seed 0] [--workloads dlrm-a1 cnn-dp] [--quick]
                                            [--compute-slowdown 0.25]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import random
import sys
import time
from pathlib import Path

from optimizer_service.catalog import load_topology
from optimizer_service.plan.collective import Collective
from optimizer_service.settings import Settings
from optimizer_service.syndicate.baselines import SYSTEMS
from optimizer_service.syndicate.dag import TrainingDAG, comm, compute
from optimizer_service.syndicate.facade import plan_job
from optimizer_service.syndicate.mcmc import mcmc
from optimizer_service.syndicate.motif_cost import MotifCostModel
from optimizer_service.syndicate.problem import Problem
from optimizer_service.syndicate.scheduler import Policy
from optimizer_service.syndicate.workloads import build, fsdp, workload_names

ROOT = Path(__file__).resolve().parents[1]
TOPOLOGY = "hgx2-4n"
AR_SIZES = [4**k * 2**10 for k in range(1, 11)]       # 4 KiB … 1 GiB
A2A_SIZES = [4**k * 2**10 for k in range(9)]          # 1 KiB … 64 MiB per destination block
DLRM = ("dlrm-a1", "dlrm-a2", "dlrm-a3")
OVERLAP_A2A_BLOCK = 2**18                              # 256 KiB per destination block: 8 MiB per rank
OVERLAP_AR_SIZES = [4**k * 2**20 for k in range(6)]   # 1 MiB … 1 GiB


def label(nbytes: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def systems(topology, names: list[str], budget: float, seed: int, native: bool) -> tuple[dict, dict]:
    """Section 1 (each workload planned by the plan_job façade, as p2 optimize does); also returns each workload's (problem, Syndicate result) for section 2."""
    rows, kept = {}, {}
    for name in names:
        print(f"systems: {name} ...", flush=True)
        job = plan_job(build(name, topology), topology, budget, seed, native=native)
        problem = job.problem
        results = {r.name: r for r in job.results}
        bs, fifo, syn = results["BS+"].seconds, results["FIFO"].seconds, results["Syndicate"]
        steady_bs, steady_fifo = results["BS+"].steady_seconds, results["FIFO"].steady_seconds
        rows[name] = {
            "systems": {r.name: {"iteration_seconds": r.seconds,
                                 "compute_idle_fraction": r.evaluation.compute_idle_fraction,
                                 "speedup_over_bs+": bs / r.seconds, "speedup_over_fifo": fifo / r.seconds,
                                 "steady_state_seconds": r.steady_seconds,
                                 "steady_speedup_over_bs+": steady_bs / r.steady_seconds,
                                 "steady_speedup_over_fifo": steady_fifo / r.steady_seconds}
                        for r in results.values()},
            "syndicate_options": {problem.dag.nodes[node].name: problem.options[k][syn.choice[k]].name
                                  for k, node in enumerate(problem.comm_nodes)},
            "syndicate_search": {"evaluations": syn.search.evaluations, "elapsed": syn.search.elapsed,
                                 "accepted": syn.search.accepted, "stopped_by": syn.search.stopped_by,
                                 "last_improvement_evaluation": syn.search.improvements[-1][0]},
        }
        kept[name] = (problem, syn)
    return rows, kept


def alone_on_channel_zero(kind: Collective, nbytes: int, cost) -> dict[str, float]:
    """Each unsegmented channel-0 option family's time for one 32-rank op alone."""
    dag = TrainingDAG(f"{kind}", (compute("c", 1e-6), comm("op", kind, range(32), nbytes // 4, "c")))
    problem = Problem(dag, cost)
    return {o.base: t.isolated for o, t in zip(problem.options[0], problem.templates[0])
            if o.segments == 1 and o.channel == "ch0"}


def allreduce_families(cost, sizes: list[int]) -> list[dict]:
    rows = []
    for nbytes in sizes:
        alone = alone_on_channel_zero(Collective.ALL_REDUCE, nbytes, cost)
        own = {b: s for b, s in alone.items() if b.startswith(("ring", "tree"))}
        best_own, best_all = min(own, key=own.get), min(alone, key=alone.get)
        rows.append({"bytes": nbytes, "isolated_seconds": alone, "fastest_own": best_own,
                     "fastest_own_family": "tree" if best_own.startswith("tree") else "ring",
                     "fastest_with_p2": best_all})
    return rows


def alltoall_splines(cost, sizes: list[int]) -> list[dict]:
    rows = []
    for nbytes in sizes:
        alone = alone_on_channel_zero(Collective.ALL_TO_ALL, nbytes, cost)
        rows.append({"block_bytes": nbytes, "isolated_seconds": alone, "fastest": min(alone, key=alone.get)})
    return rows


def overlap(intervals_a: list[tuple], intervals_b: list[tuple]) -> float:
    """Seconds in which some (start, end, channel) of a and some of b run on different channels."""
    points = sorted({p for s, e, _ in intervals_a + intervals_b for p in (s, e)})
    total = 0.0
    for lo, hi in zip(points, points[1:]):
        mid = (lo + hi) / 2
        on_a = {c for s, e, c in intervals_a if s <= mid < e}
        on_b = {c for s, e, c in intervals_b if s <= mid < e}
        if any(x != y for x in on_a for y in on_b):
            total += hi - lo
    return total


def channel_findings(kept: dict) -> dict:
    out = {}
    for name in (n for n in DLRM if n in kept):
        problem, syn = kept[name]
        ops = {}
        for k, node in enumerate(problem.comm_nodes):
            op = problem.dag.nodes[node]
            template = problem.templates[k][syn.choice[k]]
            ops[op.name] = {"kind": str(op.comm.kind), "option": problem.options[k][syn.choice[k]].name,
                            "channels": sorted(set(template.channel))}
        used = {kind: set().union(*[set(o["channels"]) for o in ops.values() if o["kind"] == kind])
                for kind in ("AllToAll", "AllReduce")}
        ev = syn.evaluation
        spans = {"AllToAll": [], "AllReduce": []}
        busy = {kind: {} for kind in spans}
        for i, node in enumerate(ev.task_node):
            motif = problem.unrolled.nodes[node].comm
            if motif is not None and str(motif.kind) in spans:
                spans[str(motif.kind)].append((ev.start[i], ev.end[i], ev.channel[i]))
                channel = f"ch{ev.channel[i]}"
                busy[str(motif.kind)][channel] = (busy[str(motif.kind)].get(channel, 0.0)
                                                  + (ev.end[i] - ev.start[i]) / problem.iterations)
        both = overlap(spans["AllToAll"], spans["AllReduce"]) / problem.iterations
        out[name] = {"ops": ops, "all_to_all_channels": sorted(used["AllToAll"]),
                     "all_reduce_channels": sorted(used["AllReduce"]),
                     "disjoint": not used["AllToAll"] & used["AllReduce"],
                     "busy_seconds_per_iteration": busy,
                     "overlap_seconds_per_iteration": both, "overlap_fraction": both / ev.seconds}
    return out


#: Figure 18's execution plans: which channel every op of a kind is bound to.
BINDINGS = {"a2a ch1, AR ch0": {Collective.ALL_TO_ALL: "ch1", Collective.ALL_REDUCE: "ch0"},
            "a2a ch0, AR ch1": {Collective.ALL_TO_ALL: "ch0", Collective.ALL_REDUCE: "ch1"},
            "one channel": {Collective.ALL_TO_ALL: "ch0", Collective.ALL_REDUCE: "ch0"},
            "free": {}}


def fits(binding: str, kind: Collective, option) -> bool:
    """Whether ``option`` of an op of ``kind`` runs where ``binding`` puts that kind."""
    return BINDINGS[binding].get(kind, option.channel) == option.channel


def bindings(kept: dict, budget: float, seed: int) -> dict:
    """Section (d): Syndicate's search under each binding of :data:`BINDINGS`."""
    print("bindings ...", flush=True)
    out = {}
    for name in (n for n in DLRM if n in kept):
        problem = kept[name][0]
        kinds = [problem.dag.nodes[node].comm.kind for node in problem.comm_nodes]
        out[name] = {}
        for binding in BINDINGS:
            ok = {id(o) for k, options in enumerate(problem.options) for o in options if fits(binding, kinds[k], o)}
            allowed = lambda o, ok=ok: id(o) in ok              # noqa: E731
            found = mcmc(problem, problem.greedy(allowed), allowed=allowed, budget=budget, seed=seed)
            out[name][binding] = {"iteration_seconds": found.seconds,
                                  "steady_state_seconds": problem.steady_seconds(found.choice)}
    return out


def bound_overlap(cost, a2a_block: int, ar_sizes: list[int], native: bool) -> list[dict]:
    """Section (e), Figure 18 as a microbenchmark: a 32-rank all-to-all (``a2a_block``
    bytes per destination) and an all-reduce issued together, the best plan of each
    binding of :data:`BINDINGS` found exhaustively (one iteration)."""
    rows = []
    for nbytes in ar_sizes:
        dag = TrainingDAG("a2a-ar", (compute("c", 1e-6), comm("a2a", Collective.ALL_TO_ALL, range(32), a2a_block // 4, "c"),
                                     comm("ar", Collective.ALL_REDUCE, range(32), nbytes // 4, "c"),
                                     compute("step", 1e-6, "a2a", "ar")))
        problem = Problem(dag, cost, iterations=1, native=native)
        alone = [min(t.isolated for o, t in zip(options, templates) if o.channel == "ch0")
                 for options, templates in zip(problem.options, problem.templates)]
        best = {}
        for binding in BINDINGS:
            allowed = [[k for k, o in enumerate(options) if fits(binding, kind, o)]
                       for kind, options in zip((Collective.ALL_TO_ALL, Collective.ALL_REDUCE), problem.options)]
            seconds, a, r = min((problem.cost_of([a, r]), a, r) for a in allowed[0] for r in allowed[1])
            best[binding] = {"seconds": seconds, "all_to_all": problem.options[0][a].name,
                             "all_reduce": problem.options[1][r].name}
        bound = {b: v["seconds"] for b, v in best.items() if b != "free"}
        rows.append({"a2a_block_bytes": a2a_block, "all_reduce_bytes": nbytes,
                     "all_reduce_over_all_to_all_alone": alone[1] / alone[0], "plans": best,
                     "best_binding": min(bound, key=bound.get)})
    return rows


def findings(cost, kept: dict, quick: bool, budget: float, seed: int, native: bool) -> dict:
    print("findings ...", flush=True)
    ar = allreduce_families(cost, AR_SIZES[::3] if quick else AR_SIZES)
    a2a = alltoall_splines(cost, A2A_SIZES[::3] if quick else A2A_SIZES)
    dlrm_a2a = {name: {problem.dag.nodes[node].name: {"block_bytes": problem.dag.nodes[node].comm.elements * 4,
                                                      "option": problem.options[k][syn.choice[k]].name}
                       for k, node in enumerate(problem.comm_nodes)
                       if problem.dag.nodes[node].comm.kind is Collective.ALL_TO_ALL}
                for name, (problem, syn) in kept.items() if name in DLRM}
    return {"all_reduce": ar, "all_to_all": a2a, "dlrm_all_to_all_choices": dlrm_a2a,
            "dlrm_channels": channel_findings(kept), "dlrm_bindings": bindings(kept, budget, seed),
            "bound_overlap": bound_overlap(cost, OVERLAP_A2A_BLOCK, OVERLAP_AR_SIZES[::2] if quick else OVERLAP_AR_SIZES,
                                           native)}


def rate(price, problem: Problem, policy: Policy, window: float, seed: int) -> float:
    """Calls per second of ``price(choice, policy)`` under random one-op changes from the greedy plan."""
    choice, rng = problem.greedy(), random.Random(seed)
    count, began = 0, time.perf_counter()
    while time.perf_counter() - began < window:
        k = rng.randrange(len(choice))
        choice[k] = rng.randrange(len(problem.options[k]))
        price(choice, policy)
        count += 1
    return count / (time.perf_counter() - began)


def speed(cost, quick: bool, seed: int, native: bool) -> dict:
    print("speed ...", flush=True)
    window = 0.5 if quick else 2.0
    problem = Problem(fsdp(32, layers=40), cost, native=native)
    policies = {}
    for policy in Policy:
        cpp = rate(problem.cost_of, problem, policy, window, seed) if problem.compiled is not None else None
        python = rate(problem.python_cost_of, problem, policy, window, seed)
        policies[policy.value] = {"evaluations_per_second": cpp if cpp is not None else python,
                                  "python_evaluations_per_second": python,
                                  "cpp_over_python": cpp / python if cpp is not None else None}
    small = {"nodes": len(problem.dag.nodes), "comm_ops": len(problem.comm_nodes),
             "tasks_greedy": problem.graph(problem.greedy(), False)[0].size, "compiled": problem.compiled is not None,
             **policies[Policy.CRITICAL_PATH.value], "policies": policies, "window_seconds": window}

    layers, budget = (34, 10.0) if quick else (167, 60.0)
    began = time.perf_counter()
    problem = Problem(fsdp(32, layers=layers), cost, native=native)
    built = time.perf_counter() - began
    start = problem.greedy()
    found_at: list[tuple[int, float]] = []
    began = time.perf_counter()
    result = mcmc(problem, start, budget=budget, seed=seed,
                  progress=lambda evaluations, _: found_at.append((evaluations, time.perf_counter() - began)))
    large = {"nodes": len(problem.dag.nodes), "comm_ops": len(problem.comm_nodes),
             "tasks_greedy": problem.graph(start, False)[0].size, "problem_seconds": built, "budget": budget,
             "elapsed": result.elapsed, "stopped_by": result.stopped_by, "evaluations": result.evaluations,
             "evaluations_per_second": result.evaluations / result.elapsed, "accepted": result.accepted,
             "start_seconds": result.start_seconds, "best_seconds": result.seconds,
             "improvements": len(result.improvements) - 1,
             "final_best_evaluation": result.improvements[-1][0],
             "final_best_at_seconds": found_at[-1][1] if found_at else 0.0,
             "converged_within_10s": result.stopped_by == "no-improvement" and result.elapsed <= 10.0}
    return {"dag_200": small, "dag_500": large}


def grouped_bars(ax, groups: list[str], series: dict[str, list[float]], **xticks) -> None:
    """One bar per series side by side in each group, the groups labelled on the x axis."""
    width = 0.8 / len(series)
    for j, (name, values) in enumerate(series.items()):
        ax.bar([x + (j - len(series) / 2 + 0.5) * width for x in range(len(groups))], values, width, label=name)
    ax.set_xticks(range(len(groups)), groups, fontsize=8, **xticks)
    ax.legend(fontsize=7)


def plot(document: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 5, figsize=(27, 4.2))
    rows = document["systems"]
    names = [s for s in SYSTEMS if s != "BS+"]
    grouped_bars(axes[0], list(rows), {system: [r["systems"][system]["speedup_over_bs+"] for r in rows.values()]
                                       for system in names}, rotation=20)
    axes[0].axhline(1.0, color="k", lw=0.8)
    axes[0].axhline(1.2, color="r", ls=":", lw=0.8)
    low = min(r["systems"][s]["speedup_over_bs+"] for r in rows.values() for s in names)
    axes[0].set_ylim(min(0.9, low - 0.05), None)
    axes[0].set_ylabel("speedup over BS+")
    axes[0].set_title(f"iteration time, {TOPOLOGY}")
    ar = document["findings"]["all_reduce"]
    for family in ar[0]["isolated_seconds"]:
        axes[1].loglog([r["bytes"] for r in ar], [r["isolated_seconds"][family] for r in ar], marker=".",
                       label=family, ls="--" if family.startswith("p2") else "-")
    axes[1].set_xlabel("all-reduce bytes (32 ranks)")
    axes[1].set_ylabel("seconds alone (ch0, unsegmented)")
    axes[1].set_title("all-reduce option families")
    axes[1].legend(fontsize=7)
    runs = document["findings"]["dlrm_bindings"]
    grouped_bars(axes[3], list(runs), {binding: [r[binding]["iteration_seconds"] * 1e3 for r in runs.values()]
                                       for binding in BINDINGS})
    axes[3].set_ylabel("iteration (ms)")
    axes[3].set_title("Syndicate, a2a / AR bound to channels (Fig. 18)")
    micro = document["findings"]["bound_overlap"]
    for binding in BINDINGS:
        axes[4].loglog([r["all_reduce_bytes"] for r in micro], [r["plans"][binding]["seconds"] * 1e3 for r in micro],
                       marker=".", label=binding, ls="--" if binding == "free" else "-")
    axes[4].set_xlabel(f"all-reduce bytes beside a {label(OVERLAP_A2A_BLOCK)}-block all-to-all (32 ranks)")
    axes[4].set_ylabel("best plan (ms)")
    axes[4].set_title("a2a beside AR, by binding (Fig. 18 microbenchmark)")
    axes[4].legend(fontsize=7)
    sp = document["speed"]
    bars = {f"cost_of\n{sp['dag_200']['nodes']} nodes": sp["dag_200"]["evaluations_per_second"],
            f"Python path\n{sp['dag_200']['nodes']} nodes": sp["dag_200"]["python_evaluations_per_second"],
            f"MCMC\n{sp['dag_500']['comm_ops']} comm-ops": sp["dag_500"]["evaluations_per_second"]}
    axes[2].bar(list(bars), list(bars.values()))
    axes[2].axhline(2000, color="r", ls=":", lw=0.8, label="goal 2,000/s")
    axes[2].set_ylabel("per second")
    axes[2].set_title("search speed")
    axes[2].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def report(document: dict) -> None:
    def goals(syn: dict, name: str, prefix: str) -> str:
        bs, fifo = syn[f"{prefix}speedup_over_bs+"], syn[f"{prefix}speedup_over_fifo"]
        if name in DLRM:
            return f"BS+ {'yes' if bs >= 1.2 else 'NO'}, FIFO {'yes' if fifo >= 1.3 else 'NO'}"
        if name == "cnn-dp":
            return f"within 3 % {'yes' if bs >= 1 / 1.03 else 'NO'}"
        return "-"

    print("\nSyndicate's speedups: two-iteration time (what the search minimises) | steady state (what the paper measures)")
    print(f"{'workload':<18} {'Syn/BS+':>8} {'Syn/FIFO':>8} {'SExec/BS+':>9} {'SSched/BS+':>10} {'HO/BS+':>7}  "
          f"{'goals':<18}| {'Syn/BS+':>8} {'Syn/FIFO':>8}  goals (DLRM: >=1.2 vs BS+, >=1.3 vs FIFO)")
    for name, row in document["systems"].items():
        s = row["systems"]
        syn = s["Syndicate"]
        print(f"{name:<18} {syn['speedup_over_bs+']:>8.3f} {syn['speedup_over_fifo']:>8.3f} "
              f"{s['S-Exec']['speedup_over_bs+']:>9.3f} {s['S-Sched']['speedup_over_bs+']:>10.3f} "
              f"{s['HO']['speedup_over_bs+']:>7.3f}  {goals(syn, name, ''):<18}| "
              f"{syn['steady_speedup_over_bs+']:>8.3f} {syn['steady_speedup_over_fifo']:>8.3f}  "
              f"{goals(syn, name, 'steady_')}")
    f = document["findings"]
    print("\nall-reduce, 32 ranks, alone on ch0: fastest ring/tree family | fastest incl. P2")
    for r in f["all_reduce"]:
        times = "  ".join(f"{b} {s * 1e6:.0f}us" for b, s in r["isolated_seconds"].items())
        print(f"  {label(r['bytes']):>8}: {r['fastest_own']:<6} | {r['fastest_with_p2']:<6}   ({times})")
    print("all-to-all, 32 ranks, alone on ch0, per-destination block: fastest splining")
    print("  " + ", ".join(f"{label(r['block_bytes'])}: {r['fastest']}" for r in f["all_to_all"]))
    for name, ops in f["dlrm_all_to_all_choices"].items():
        print(f"  Syndicate on {name}: " + ", ".join(f"{op} ({label(o['block_bytes'])}) {o['option']}"
                                                   for op, o in ops.items()))
    print("channels in Syndicate's DLRM plans (a2a | all-reduce), overlap on different channels per iteration")
    for name, c in f["dlrm_channels"].items():
        print(f"  {name}: a2a on {c['all_to_all_channels']} | AR on {c['all_reduce_channels']} "
              f"-> {'disjoint' if c['disjoint'] else 'shared'}; overlap {c['overlap_seconds_per_iteration'] * 1e3:.2f} ms "
              f"({c['overlap_fraction']:.0%} of the iteration)")
        print("     busy per iteration: " + "; ".join(
            f"{kind} " + ", ".join(f"{ch} {t * 1e3:.2f} ms" for ch, t in sorted(chs.items()))
            for kind, chs in c["busy_seconds_per_iteration"].items()))
    print("Figure 18: Syndicate with every a2a / AR bound to one channel, iteration | steady state")
    for name, runs in f["dlrm_bindings"].items():
        print(f"  {name}: " + "; ".join(f"{b} {r['iteration_seconds'] * 1e3:.2f} | {r['steady_state_seconds'] * 1e3:.2f} ms"
                                        for b, r in runs.items()))
    print(f"Figure 18 as a microbenchmark: a {label(OVERLAP_A2A_BLOCK)}-block all-to-all beside an all-reduce, "
          f"best plan per binding (ms)")
    for r in f["bound_overlap"]:
        plans = r["plans"]
        print(f"  AR {label(r['all_reduce_bytes']):>8} ({r['all_reduce_over_all_to_all_alone']:5.2f}x the a2a alone): "
              + "; ".join(f"{b} {p['seconds'] * 1e3:.2f}" for b, p in plans.items())
              + f" -> best bound: {r['best_binding']}; free: a2a {plans['free']['all_to_all']}, "
                f"AR {plans['free']['all_reduce']}")
    small, large = document["speed"]["dag_200"], document["speed"]["dag_500"]
    print(f"\nspeed: {small['nodes']}-node DAG ({small['tasks_greedy']} tasks unrolled, greedy plan): "
          f"{small['evaluations_per_second']:.0f} evaluations/s (goal >= 2000)"
          f"{'' if small['compiled'] else ' -- C++ extension not built, Python path'}")
    for policy, r in small["policies"].items():
        ratio = f"C++/Python x{r['cpp_over_python']:.0f}" if r["cpp_over_python"] else "Python only"
        print(f"       {policy:<14} {r['evaluations_per_second']:8.0f}/s, Python path "
              f"{r['python_evaluations_per_second']:6.0f}/s ({ratio})")
    print(f"       {large['comm_ops']}-comm-op DAG ({large['nodes']} nodes): Problem {large['problem_seconds']:.2f} s, "
          f"MCMC stopped by {large['stopped_by']} after {large['elapsed']:.1f} s, {large['evaluations']} evaluations "
          f"({large['evaluations_per_second']:.0f}/s), final best at evaluation {large['final_best_evaluation']} "
          f"({large['final_best_at_seconds']:.1f} s), {large['start_seconds'] * 1e3:.2f} -> "
          f"{large['best_seconds'] * 1e3:.2f} ms; converged within 10 s: "
          f"{'yes' if large['converged_within_10s'] else 'NO'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=float, default=None, help="MCMC seconds per system (default 5; 1 with --quick)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workloads", nargs="+", default=None, help="default: all built-in ones")
    parser.add_argument("--quick", action="store_true", help="fewer sizes, smaller budgets: a smoke run")
    parser.add_argument("--compute-slowdown", type=float, default=0.0, metavar="S",
                        help="what-if: channel 0's motifs make compute take 1 + S times as long (scheduler "
                             "'Interference'; e.g. 0.25); writes optimize-compute-slowdown-S.{json,png}")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)
    budget = args.budget if args.budget is not None else (1.0 if args.quick else 5.0)
    names = args.workloads or workload_names()
    unknown = [n for n in names if n not in workload_names()]
    if not budget > 0 or unknown or not 0 <= args.compute_slowdown <= 10:
        print(f"optimize: --budget must be > 0, --compute-slowdown in [0, 10] and workloads one of "
              f"{', '.join(workload_names())}{f' (unknown: {unknown[0]})' if unknown else ''}", file=sys.stderr)
        return 2
    began = time.perf_counter()
    topology = load_topology(TOPOLOGY)
    if args.compute_slowdown:
        topology = dataclasses.replace(topology, links=tuple(
            dataclasses.replace(link, compute_slowdown=args.compute_slowdown) if link.channel == 0 else link
            for link in topology.links))
    cost = MotifCostModel(topology)
    native = not Settings().pure_python        # P2_PURE_PYTHON=1: every problem priced in Python
    rows, kept = systems(topology, names, budget, args.seed, native)
    document = {"benchmark": "optimize", "topology": TOPOLOGY, "budget": budget, "seed": args.seed,
                "quick": args.quick, "compute_slowdown": topology.compute_slowdowns(),
                "machine": {"cpus": __import__("os").cpu_count(), "python": platform.python_version()},
                "systems": rows, "findings": findings(cost, kept, args.quick, budget, args.seed, native),
                "speed": speed(cost, args.quick, args.seed, native)}
    document["wall_seconds"] = time.perf_counter() - began
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"optimize-compute-slowdown-{args.compute_slowdown:g}" if args.compute_slowdown else "optimize"
    (args.out / f"{stem}.json").write_text(json.dumps(document, indent=1) + "\n")
    plot(document, args.out / f"{stem}.png")
    report(document)
    print(f"wall time {document['wall_seconds']:.0f} s; wrote {args.out / stem}.json and .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
