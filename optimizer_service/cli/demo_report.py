"""``p2 demo``'s report: phases from rank 0's per-step record, the table, the JSON and the plot.

Phases (steps, 1-based; ``v(s)`` the plan version step ``s`` ran, 0 passthrough):

* ``passthrough`` — steps before the first switch to a plan, after the first
  :data:`WARMUP` (allocators, lazily built communicators);
* ``first-plan`` — steps running the first plan the service committed, before
  the cluster changed, after :data:`SETTLE` steps on it;
* ``changed`` — steps after the change still running the plan that ran when
  it came (after :data:`SETTLE`): what the job would do without replanning;
* ``replanned`` — steps running the plan of the service's first commit after
  the change (after :data:`SETTLE`): a search's plan, searched on a trace window
  mostly from after the change; a plan re-installed by a rollback or a restore,
  measured before the change, is no replan, nor a plan searched on the old
  cluster's window.

Each phase's ``nic_drops_per_iteration`` is, per channel, the packets the
NICs' ``tbf`` queues dropped per iteration over its steps (each drop costs a
TCP flow a retransmission, at least 200 ms when it ends a burst: a cost no
fluid cost model has; None on loopback).

Each phase's ``host_cores`` is how the host's cores were spent over its steps
(:func:`deploy.emulated.cores.shares`: ``busy`` — processes at normal priority
and the kernel's interrupts —, ``kernel`` of that, ``niced`` — the service's
search worker —, ``idle``; None without samples): an iteration whose cores
were all but fully busy is bound by them, whatever the plan.

Each phase's measured iteration time is the median of its steps, less those
that ran beside one of the service's searches on the ranks' own cores
(:mod:`optimizer_service.cli.demo_searching`: ``search_steps`` of them; the
median of all its steps is ``with_searches_iteration_seconds``). Its
``model_iteration_seconds`` is the live search's model time for that plan (for
passthrough: the first search's model time of the traced job with nothing
planned, its ``running_seconds``); its ``predicted_iteration_seconds`` is what
the service expected when it committed the plan: the model's ratio of that plan
to the one running then, times the running one's measured median
(:func:`optimizer_service.control.policy._expected`; passthrough's is the
model's). ``speedup`` is passthrough's
median over the first plan's. ``replan.iterations_to_commit``: iterations from
the change to the service's commit of the replanned plan.
``replan.ratio_to_offline_best``: the model's time for the replanned plan (the
live search's, on the topology it re-fitted from the motif times it measured)
over the model's time for the best plan of an offline search told the new rate,
on a trace window of the changed cluster. Both are model figures on the same
scale (channel 0 as calibrated; the live search moved channel 1 by what it
measured, the offline one by the true factor): how close the live loop gets to
a planner told the truth. ``benchmarks/loop.py`` runs both plans and measures them.

**The bound** (issue 32, item 6): each stored plan carries the lower bound on
the job's iteration time on the cluster state it was searched for
(``bound_iteration_seconds``). ``passthrough``, ``first-plan`` and the peer
before the change get the first plan's bound; ``changed``, ``replanned`` and
the peer after the change the replanned plan's (searched on the changed
cluster). ``ratio_to_bound`` is measured over bound (None without a bound).

**The peer** (:mod:`optimizer_service.cli.demo_turns`): the job under plain
gloo over every NIC, in turns with the service's job. ``peer.before`` and
``peer.after`` are its turns on each cluster state as one row: the median of
their steps after each turn's warm-up (:data:`TURN_WARMUP`; :data:`WARMUP` in
the first turn), the drops per iteration and the cores' shares over those
steps, ``turns``, and ``turn_seconds`` (per turn: the job's step it followed
and the turn's median); turns beside a search are left out of its medians as
the job's steps are (``search_turns``, ``with_searches_iteration_seconds``).
Each phase's ``peer_iteration_seconds`` is the median of the peer's turns
*beside* it (on its cluster state, run within one of the job's turns of the
phase's steps: ``every``): ``speedup_over_peer`` is the first
plan's, ``replan.speedup_over_peer`` the replanned plan's — each plan against
the peer measured minutes, not a run, apart (without a turn beside it, the
peer's row of its cluster state). ``replan.speedup_over_passthrough``:
passthrough over the replanned plan, passthrough's time taken before the
change (it runs on the first NIC alone, which the change leaves as it was).
The job's first :data:`TURN_WARMUP` steps of each of its turns after the
first are in no phase (``turn_warmup``): neither job's median counts a resumption.

**Committed plans** (:func:`committed_plans`): every plan version the job ran,
measured on the cluster state it was committed for (before or after the
change, by the step of its commit; after :data:`SETTLE` steps on it), with the
service's prediction for it, its error and its bound: what "every prediction
within 15 %" is judged on. A plan committed for the state before the change
that only ran after it has no measurement there and no error.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Collection, Sequence
from dataclasses import replace
from pathlib import Path

from deploy.emulated import cores
from optimizer_service.cli.demo_searching import quiet, quiet_turns, searched_steps, searched_turn
from optimizer_service.errors import InvalidInputError

WARMUP = 5
SETTLE = 3
#: Steps at the start of each turn of a job run in turns that no median takes
#: (:mod:`optimizer_service.cli.demo_turns`): a job resumed after a pause starts its TCP flows
#: from a small window again (slow start after idle) and its caches cold.
TURN_WARMUP = 2
TRACE_DIR = "traces-changed"
PHASES = ("passthrough", "first-plan", "changed", "replanned")


def drop_rate(drops: Sequence[tuple[int, dict[int, int]]], first: int, last: int) -> dict[str, float] | None:
    """Per channel, packets dropped per iteration between steps ``first`` and
    ``last`` from the demo's ``(step, drops so far)`` samples (None without two around them)."""
    around = _around(drops, first, last)
    if around is None:
        return None
    (start, at_start), (end, at_end) = around
    return {str(c): (at_end[c] - at_start.get(c, 0)) / (end - start) for c in sorted(at_end)}


def _around(samples: Sequence[tuple[int, object]], first: int, last: int) -> tuple[tuple, tuple] | None:
    """The last ``(step, value)`` sample before step ``first`` and the first at or after
    ``last`` (the value counted up to that step), or None without two such."""
    before = [sample for sample in samples if sample[0] < first]
    after = [sample for sample in samples if sample[0] >= last]
    if not before or not after or after[0][0] <= before[-1][0]:
        return None
    return before[-1], after[0]


def core_shares(samples: Sequence[tuple[int, Sequence[float]]], first: int, last: int) -> dict[str, float] | None:
    """How the host's cores were spent between steps ``first`` and ``last`` (the samples
    around them, as :func:`drop_rate`; None without two)."""
    around = _around(samples, first, last)
    if around is None:
        return None
    (_, at_start), (_, at_end) = around
    return cores.shares(cores.CoreTimes.from_list(at_start), cores.CoreTimes.from_list(at_end))


def ratio(measured: float | None, bound: float | None) -> float | None:
    """Measured over bound (None without both)."""
    return measured / bound if measured and bound else None


def _since_switch(versions: Sequence[int], step: int) -> int:
    """Steps before ``step`` (1-based) that ran the same plan version without a switch between."""
    k = step
    while k > 1 and versions[k - 2] == versions[step - 1]:
        k -= 1
    return step - k


def _bound(plans: dict, version: int | None) -> float | None:
    return None if not version else (plans.get(version) or {}).get("bound_iteration_seconds")


def _predicted(plans: dict, version: int, unplanned: float | None) -> float | None:
    """What the service expected of plan ``version`` when it committed it (an empty plan that rolls back
    to passthrough: passthrough's model time)."""
    if version == 0:
        return unplanned
    state = plans.get(version) or {}
    if state.get("predicted_seconds") is not None:
        return state["predicted_seconds"]
    return unplanned if _reinstalled(plans, version) == 0 else None


def _unplanned(events: list[dict]) -> float | None:
    """The first search's model time of the traced job with nothing planned."""
    first_search = next((e["search"] for e in events if e["kind"] == "searched" and "search" in e), {})
    return first_search.get("running_seconds", first_search.get("fifo_seconds"))


def phases(rank0: dict, change_step: int | None, plans: dict, events: list[dict],
           drops: Sequence[tuple[int, dict[int, int]]] = (),
           core_times: Sequence[tuple[int, Sequence[float]]] = (), skip: Collection[int] = ()) -> list[dict]:
    """The phases' rows (module docstring); ``skip``: steps no phase takes (``turn_warmup``)."""
    seconds, versions = rank0["step_seconds"], rank0["plan_versions"]
    skipped = set(skip)
    steps = [s for s in range(1, len(seconds) + 1) if s not in skipped]

    def v(step: int) -> int:
        return versions[step - 1]

    def since_switch(step: int) -> int:
        return _since_switch(versions, step)

    first_switch = next((s for s in steps if v(s) > 0), None)
    first = v(first_switch) if first_switch else None
    change = change_step if change_step is not None else len(seconds) + 1
    at_change = v(change) if change <= len(seconds) else None
    committed = replan_version(events, change_step)
    after = next((s for s in steps if s > change and v(s) == committed), None) if committed else None
    replanned = v(after) if after else None
    chosen = {
        "passthrough": [s for s in steps if (first_switch is None or s < first_switch) and s > WARMUP],
        "first-plan": [s for s in steps if first and v(s) == first and s < change and since_switch(s) >= SETTLE],
        "changed": [s for s in steps if at_change is not None and s > change + 1 and v(s) == at_change
                    and (after is None or s < after)],
        "replanned": [s for s in steps if after and s >= after and v(s) == replanned and since_switch(s) >= SETTLE],
    }
    unplanned = _unplanned(events)
    version = {"passthrough": 0, "first-plan": first, "changed": at_change, "replanned": replanned}
    # Before the change the first plan's bound, after it the replanned plan's (module docstring).
    bound = {name: _bound(plans, first if name in ("passthrough", "first-plan") else replanned) for name in PHASES}
    searched = searched_steps(core_times)
    rows = []
    for name in PHASES:
        picked = chosen[name]
        plan = version[name]
        kept = quiet(picked, searched)
        measured = statistics.median(seconds[s - 1] for s in kept) if kept else None
        rows.append({"name": name, "plan_version": plan, "steps": len(kept),
                     "first_step": picked[0] if picked else None, "last_step": picked[-1] if picked else None,
                     "measured_iteration_seconds": measured, "search_steps": len(picked) - len(kept),
                     "with_searches_iteration_seconds": (statistics.median(seconds[s - 1] for s in picked)
                                                         if picked else None),
                     "predicted_iteration_seconds": None if plan is None else _predicted(plans, plan, unplanned),
                     "model_iteration_seconds": unplanned if plan == 0 else model_seconds(events, plan),
                     "bound_iteration_seconds": bound[name], "ratio_to_bound": ratio(measured, bound[name]),
                     "nic_drops_per_iteration": drop_rate(drops, picked[0], picked[-1]) if picked else None,
                     "host_cores": core_shares(core_times, picked[0], picked[-1]) if picked else None})
    return rows


def committed_plans(rank0: dict, change_step: int | None, plans: dict, events: list[dict],
                    skip: Collection[int] = (), searched: Collection[int] = ()) -> list[dict]:
    """Every plan version the job ran (module docstring), on the cluster state it was committed for:
    ``cluster`` "before" when the service's commit of it came before the change (else, without a
    commit event, when it first ran before it), measured over its steps before the change; else
    "after", over its steps after the change's first two. A plan committed just before the change
    that ran only after it has no steps on its state: no measurement, no prediction error (its
    prediction was for a cluster it never ran on). A plan a rollback re-installed (origin
    ``rollback to vN``) carries vN's prediction, made for vN's state: it takes vN's ``cluster`` (in a
    DLRM loop run the NIC slowed while v2 was on trial, the rollback re-installed v1 as v3 after the
    change, and v3 was counted 53 % under a prediction made before it). ``skip`` as for
    :func:`phases`; ``searched``: the steps beside a search, left out as the phases leave them
    (:mod:`~optimizer_service.cli.demo_searching`)."""
    seconds, versions = rank0["step_seconds"], rank0["plan_versions"]
    change = change_step if change_step is not None else len(seconds) + 1
    unplanned = _unplanned(events)
    skipped = set(skip)
    committed = {event["version"]: event["iteration"] + 1 for event in events
                 if event.get("kind") == "commit" and event.get("iteration") is not None}
    rows, before_of = [], {}
    for version in sorted(set(versions) - {0}):
        ran = [s for s in range(1, len(seconds) + 1) if versions[s - 1] == version and s not in skipped]
        before = before_of[version] = before_of.get(_reinstalled(plans, version),
                                                    committed.get(version, ran[0]) < change)
        picked = quiet([s for s in ran if (s < change if before else s > change + 1)
                        and _since_switch(versions, s) >= SETTLE], searched)
        measured = statistics.median(seconds[s - 1] for s in picked) if picked else None
        row = {"plan_version": version, "cluster": "before" if before else "after", "steps": len(picked),
               "measured_iteration_seconds": measured,
               "predicted_iteration_seconds": _predicted(plans, version, unplanned),
               "model_iteration_seconds": model_seconds(events, version),
               "bound_iteration_seconds": _bound(plans, version),
               "ratio_to_bound": ratio(measured, _bound(plans, version))}
        rows.append({**row, "prediction_error": prediction_error(row)})
    return rows


def _reinstalled(plans: dict, version: int) -> int | None:
    """The plan a rollback re-installed as ``version``, or None (a search's plan)."""
    origin = (plans.get(version) or {}).get("origin", "")
    prefix = "rollback to v"
    return int(origin[len(prefix):]) if origin.startswith(prefix) and origin[len(prefix):].isdigit() else None


def peer(result: dict | None, rows: list[dict]) -> dict:
    """``{before, after}``: the peer's turns on each cluster state as one row (module docstring), each
    with the bound of the phases beside it (None for a state without turns, or without a peer)."""
    bound = {row["name"]: row["bound_iteration_seconds"] for row in rows}
    turns = (result or {}).get("turns", [])
    return {state: peer_row(result, [turn for turn in turns if turn["cluster"] == state],
                            bound["first-plan" if state == "before" else "replanned"])
            for state in ("before", "after")}


def _measured(turn: dict, count: int) -> list[int]:
    """The peer's steps of ``turn`` that its medians take (of the ``count`` it ran)."""
    return [s for s in range(turn["measured_from"], turn["last_step"] + 1) if s <= count]


def peer_row(result: dict | None, turns: list[dict], bound: float | None) -> dict | None:
    """One row of the peer's ``turns`` (None without any)."""
    if result is None or not turns:
        return None
    seconds = result["rank0"]["step_seconds"]
    per_turn = [(turn["job_step"], _measured(turn, len(seconds))) for turn in turns]
    picked = [s for _, steps in per_turn for s in steps]
    if not picked:
        return None
    kept = [s for turn in quiet_turns(turns) for s in _measured(turn, len(seconds))] or picked
    measured = statistics.median(seconds[s - 1] for s in kept)
    drops, spent = _turn_sum(turns, "drops"), _turn_sum(turns, "cores")
    shares = None
    if spent is not None:
        nothing = cores.CoreTimes.from_list([spent[0]] + [0.0] * (len(spent) - 1))
        shares = cores.shares(nothing, cores.CoreTimes.from_list(spent))
    return {"measured_iteration_seconds": measured, "steps": len(kept), "turns": len(turns),
            "search_turns": sum(map(searched_turn, turns)),
            "with_searches_iteration_seconds": statistics.median(seconds[s - 1] for s in picked),
            "first_step": picked[0], "last_step": picked[-1], "gloo_socket_ifname": result["ifnames"],
            "turn_seconds": [[step, statistics.median(seconds[s - 1] for s in steps)] for step, steps in per_turn
                             if steps],
            "nic_drops_per_iteration": None if drops is None else {str(c): n / len(picked)
                                                                   for c, n in sorted(drops.items())},
            "host_cores": shares, "bound_iteration_seconds": bound, "ratio_to_bound": ratio(measured, bound)}


def counts_minus(value: list | dict | None, taken: list | dict | None) -> list | dict | None:
    """``value`` less ``taken``, two counters the demo samples: drops per channel (dicts) or core
    times (lists, the CPU count first, kept); ``value`` as it is where either is None."""
    if value is None or taken is None:
        return value
    if isinstance(value, dict):
        return {channel: count - taken.get(channel, 0) for channel, count in value.items()}
    return [value[0], *(a - b for a, b in zip(value[1:], taken[1:]))]


def counts_plus(value: list | dict | None, more: list | dict | None) -> list | dict | None:
    """``value`` and ``more`` added up (counters as in :func:`counts_minus`; either may be None)."""
    if value is None:
        return more
    if more is None:
        return value
    if isinstance(value, dict):
        return {channel: value.get(channel, 0) + more.get(channel, 0) for channel in set(value) | set(more)}
    return [more[0], *(a + b for a, b in zip(value[1:], more[1:]))]


def _turn_sum(turns: list[dict], kind: str) -> dict | list | None:
    """The turns' ``kind`` ("drops" or "cores", :func:`counts_minus`) between each turn's ``start``
    and ``end`` readings, summed (None where a turn lacks them)."""
    total = None
    for turn in turns:
        start, end = (turn.get("start") or {}).get(kind), (turn.get("end") or {}).get(kind)
        if start is None or end is None:
            return None
        total = counts_plus(total, counts_minus(end, start))
    return total


def beside(rows: list[dict], result: dict | None) -> None:
    """Give each phase row its ``peer_iteration_seconds`` and ``speedup_over_peer`` (module docstring)."""
    turns = (result or {}).get("turns", [])
    seconds = (result or {}).get("rank0", {}).get("step_seconds", [])
    every = (result or {}).get("every", 0)
    for row in rows:
        state = "before" if row["name"] in ("passthrough", "first-plan") else "after"
        near = [turn for turn in turns if turn["cluster"] == state and row["first_step"] is not None
                and row["first_step"] - every <= turn["job_step"] <= row["last_step"] + every]
        picked = [s for turn in quiet_turns(near) for s in _measured(turn, len(seconds))]
        peer_seconds = statistics.median(seconds[s - 1] for s in picked) if picked else None
        row["peer_iteration_seconds"] = peer_seconds
        row["peer_turns"] = len(near)
        row["speedup_over_peer"] = ratio(peer_seconds, row["measured_iteration_seconds"])


def over_peer_beside(row: dict, state_row: dict | None) -> float | None:
    """A phase's speed-up over the peer's turns beside it, or over the peer's row of its cluster
    state where no turn ran beside it (module docstring)."""
    if row.get("speedup_over_peer") is not None:
        return row["speedup_over_peer"]
    return speedup(state_row, row)


def speedup(slower: dict | None, faster: dict | None) -> float | None:
    """``slower``'s measured iteration time over ``faster``'s (None without both)."""
    if not slower or not faster:
        return None
    return ratio(slower["measured_iteration_seconds"], faster["measured_iteration_seconds"])


def _first_commit_after(events: list[dict], change_step: int | None) -> dict | None:
    """The service's first ``commit`` event (a search's plan) after step ``change_step`` whose search
    read a trace window mostly from after it (:func:`_searched_after`)."""
    if change_step is None:
        return None
    return next((event for i, event in enumerate(events) if event["kind"] == "commit"
                 and event.get("iteration") is not None and event["iteration"] + 1 > change_step
                 and _searched_after(events[:i], event, change_step)), None)


def _searched_after(before: list[dict], commit: dict, change_step: int) -> bool:
    """Whether more than half of the trace window the committed plan was searched on came after step
    ``change_step``. The window is the last ``window_iterations`` steps finished when the search was
    asked for (the ``replan`` event before its ``searched`` one), so a search asked for just after the
    change read the old cluster: its plan answers the old state, not the change. (In a DLRM loop run
    the slow trigger asked one step after the NIC slowed; that plan, committed 3 steps after the
    change, would have counted as a replan 3 iterations after it, and as the replan's speed.)
    Without those events (older runs), every commit after the change counts."""
    searched = next((i for i in range(len(before) - 1, -1, -1) if before[i]["kind"] == "searched"
                     and before[i].get("version") == commit.get("version")), None)
    if searched is None:
        return True
    asked = next((e for e in reversed(before[:searched]) if e["kind"] == "replan" and e.get("iteration") is not None),
                 None)
    window = (before[searched].get("search") or {}).get("window_iterations") or 0
    return asked is None or asked["iteration"] + 1 - change_step + 1 > window / 2


def iterations_to_commit(events: list[dict], change_step: int | None) -> int | None:
    commit = _first_commit_after(events, change_step)
    return None if commit is None else commit["iteration"] + 1 - change_step


def replan_version(events: list[dict], change_step: int | None) -> int | None:
    """The plan version of the first commit after the change (None without one)."""
    commit = _first_commit_after(events, change_step)
    return None if commit is None else commit.get("version")


def first_plan(events: list[dict]) -> dict:
    """When the first search was asked for (step) and how long from then until the
    coordinator committed a plan (search, trace window and two-phase commit)."""
    asked = next((e for e in events if e["kind"] == "replan"), None)
    committed = next((e for e in events if e["kind"] == "committed" and asked and e["unix"] >= asked["unix"]), None)
    return {"requested_at_step": None if asked is None or asked.get("iteration") is None else asked["iteration"] + 1,
            "seconds_to_commit": committed["unix"] - asked["unix"] if asked and committed else None}


def model_seconds(events: list[dict], version: int | None) -> float | None:
    """The live search's model time for plan ``version`` (its ``searched`` event), if any."""
    found = next((e for e in events if e["kind"] == "searched" and e.get("version") == version and "search" in e), None)
    return None if found is None else found["search"]["predicted_seconds"]


OFFLINE_PLAN = "offline-plan.json"


def offline_best(work: Path, topology_path: Path, throttle: float, budget: float) -> float | None:
    """The best predicted iteration time of a search on the changed cluster's traces, told the new rate;
    its plan goes to ``work/offline-plan.json`` (``benchmarks/loop.py`` runs it)."""
    from optimizer_service.hardware.topology import Topology
    from optimizer_service.syndicate.facade import plan_job

    files = sorted((work / TRACE_DIR).glob("*.json"))
    if not files or not topology_path.is_file():
        return None
    traces = [json.loads(path.read_text()) for path in files]
    topology = Topology.from_yaml(topology_path.read_text())
    links = tuple(replace(link, bandwidth=link.bandwidth / throttle) if link.channel == 1 else link
                  for link in topology.links)
    try:
        found = plan_job(traces, replace(topology, links=links), budget=budget, name="offline")
    except InvalidInputError:
        return None
    (work / OFFLINE_PLAN).write_text(found.plan.to_json())
    return found.chosen.steady_seconds


def prediction_error(row: dict, field: str = "predicted_iteration_seconds") -> float | None:
    """A phase's predicted (or ``field``) over measured iteration time, minus 1 (None without both)."""
    measured, predicted = row["measured_iteration_seconds"], row.get(field)
    return predicted / measured - 1 if measured and predicted else None


def _ms(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value * 1e3:.1f} ms"


def table(rows: list[dict], peer_rows: dict | None = None) -> str:
    """The phases, with the peer's rows (plan "gloo": plain gloo over every NIC) beside the phases
    of the same cluster state: before the change after passthrough, after it after ``changed``."""
    peer_rows = peer_rows or {}
    shown = []
    for row in rows:
        shown.append(row)
        state = {"passthrough": "before", "changed": "after"}.get(row["name"])
        if state and peer_rows.get(state):
            shown.append({**peer_rows[state], "name": f"peer-{state}", "plan": "gloo"})
    lines = [(f"{'phase':<13} {'plan':>5} {'steps':>6} {'measured':>11} {'predicted':>11} {'error':>6} "
              f"{'bound':>11} {'/bound':>7} {'cores busy':>14}  NIC drops/it")]
    for row in shown:
        measured, predicted = row["measured_iteration_seconds"], row.get("predicted_iteration_seconds")
        off = prediction_error(row)
        error = "-" if off is None else f"{off * 100:+.0f} %"
        plan = row.get("plan") or ("-" if row["plan_version"] is None else f"v{row['plan_version']}")
        to_bound = "-" if row["ratio_to_bound"] is None else f"{row['ratio_to_bound']:.2f}x"
        rates = row.get("nic_drops_per_iteration")
        drops = " + ".join(f"{rate:.1f}" for rate in rates.values()) if rates else "-"
        lines.append(f"{row['name']:<13} {plan:>5} {row['steps']:>6} {_ms(measured):>11} {_ms(predicted):>11} "
                     f"{error:>6} {_ms(row['bound_iteration_seconds']):>11} {to_bound:>7} "
                     f"{busy_text(row.get('host_cores')):>14}  {drops}")
    return "\n".join(lines)


#: The share of the cores the hypervisor took (steal time) from which a phase is marked: there the
#: ranks ran on less than the two cores, and a run's figures are not comparable with a run's that had
#: none (on this machine 5-19 % in two FSDP2 loop runs of 7 December: the first plan 1.22-1.26x slower
#: than alone, passthrough 1.2x slower than in the run beside them; every other run <= 0.2 %).
STEAL_MARKED = 0.02


def busy_text(shares: dict | None) -> str:
    """``"97 % (k 21 %)"``: the cores' busy share and the kernel's part of it ("-" without), and
    ``", stolen 8 %"`` after it where the hypervisor took at least :data:`STEAL_MARKED` of them."""
    if not shares:
        return "-"
    text = f"{shares['busy']:.0%} (k {shares['kernel']:.0%})"
    if shares.get("steal", 0.0) >= STEAL_MARKED:
        text += f", stolen {shares['steal']:.0%}"
    return text.replace("%", " %")


def most_stolen(host_cores: dict[str, dict | None]) -> tuple[str, float] | None:
    """The phase (or peer segment) whose cores the hypervisor took most of, and that share, where
    it is at least :data:`STEAL_MARKED` (None otherwise, or without samples)."""
    found = [(name, shares.get("steal", 0.0)) for name, shares in host_cores.items() if shares]
    worst = max(found, key=lambda item: item[1], default=None)
    return worst if worst is not None and worst[1] >= STEAL_MARKED else None


def plot(path: Path, rank0: dict, change_step: int | None, events: list[dict], title: str,
         peer_rows: dict | None = None) -> None:
    """Rank 0's iteration times with the plan switches, the change and the replanning requests;
    the peer's median (before and after the change) as dotted lines over the steps of that state."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seconds, versions = rank0["step_seconds"], rank0["plan_versions"]
    steps = list(range(1, len(seconds) + 1))
    figure, axis = plt.subplots(figsize=(10, 4.5))
    axis.plot(steps, [s * 1e3 for s in seconds], lw=0.9, color="tab:blue", label="iteration time (rank 0)")
    for step in range(2, len(steps) + 1):
        if versions[step - 1] != versions[step - 2]:
            axis.axvline(step, color="tab:green", ls="--", lw=1)
            axis.text(step, axis.get_ylim()[1] * 0.97, f" v{versions[step - 1]}", color="tab:green", va="top",
                      fontsize=8)
    if change_step is not None:
        axis.axvline(change_step, color="tab:red", lw=1.5, label="second NIC slowed")
    for event in events:
        if event["kind"] == "replan" and event.get("iteration") is not None:
            axis.plot([event["iteration"] + 1], [0], marker="^", color="tab:orange", ms=8, clip_on=False)
    change = change_step if change_step is not None else len(steps)
    for state, span in (("before", (1, change)), ("after", (change, len(steps)))):
        row = (peer_rows or {}).get(state)
        if row and row["measured_iteration_seconds"]:
            axis.plot(span, [row["measured_iteration_seconds"] * 1e3] * 2, ls=":", lw=1.5, color="tab:purple",
                      label="the peer: gloo over every NIC" if state == "before" else None)
            turns = row.get("turn_seconds") or []
            axis.plot([step + 0.5 for step, _ in turns], [value * 1e3 for _, value in turns], ls="", marker="o",
                      ms=3, color="tab:purple", label="the peer's turns (median)" if state == "before" else None)
    axis.plot([], [], ls="--", color="tab:green", label="plan switch")
    axis.plot([], [], marker="^", ls="", color="tab:orange", label="replanning asked")
    axis.set_xlabel("step")
    axis.set_ylabel("ms")
    axis.set_ylim(bottom=0)
    axis.set_title(title, fontsize=10)
    axis.legend(loc="upper left", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
