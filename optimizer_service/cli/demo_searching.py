"""Which of ``p2 demo``'s steps and peer turns ran beside one of the service's searches (issue 32).

On the emulated cluster the optimizer service runs on the host whose cores the
ranks share, and its search worker (niced, ``P2_SEARCH_NICE``) slows the ranks
beside it however low its priority: replayed beside a DLRM plan on the 2-core
host, a recorded search cost the plan 13–25 % at nice 0, 10 and 19 and under
``SCHED_IDLE`` alike (the cores' caches and the wake-ups of eight ranks, not
their share of time). Deployed, the service has a host of its own and a search
costs the ranks nothing. So the demo's medians leave those steps out, as they
leave out the peer's turns and the steps that resume after one, and report the
median with them beside (``with_searches_iteration_seconds``): what the
co-located service adds, said, not hidden.

A job's step ran *beside a search* when the niced processes took more than
:data:`SEARCH_SHARE` of the host's cores between the two readings around it (one
reading per step, the peer's turns taken out: :class:`~optimizer_service.cli.demo_turns.Meters`);
a peer turn, when they did over its measured steps. The service's policy decides
when it searches, so a search may fall in any phase and in the peer's turns
alike; both sides lose those steps. Where leaving them out would leave fewer than
:data:`MIN_STEPS` of a phase (or no turn of the peer), none is left out.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Sequence

from deploy.emulated import cores

#: The niced share of the host's cores above which a step ran beside a search. Without a
#: search the niced share is nil on the demo's host; a search's worker took about 0.4 of a
#: core (a fifth of the two) while it ran, in the loop runs of 6 December.
SEARCH_SHARE = 0.05
#: The fewest steps a phase's median keeps when steps beside a search are left out.
MIN_STEPS = 5


def niced_share(before: Sequence[float] | None, after: Sequence[float] | None) -> float | None:
    """The niced share of the cores between two core readings (None without both, or no time between)."""
    if before is None or after is None:
        return None
    found = cores.shares(cores.CoreTimes.from_list(before), cores.CoreTimes.from_list(after))
    return None if found is None else found["niced"]


def searched_steps(samples: Sequence[tuple[int, Sequence[float]]]) -> set[int]:
    """The job's steps that ran beside a search, from its core readings ``(step, times)`` (module docstring)."""
    found: set[int] = set()
    for (first, before), (last, after) in itertools.pairwise(samples):
        share = niced_share(before, after)
        if share is not None and share > SEARCH_SHARE:
            found.update(range(first + 1, last + 1))
    return found


def searched_turn(turn: dict) -> bool:
    """Whether a peer turn ran beside a search (its ``start`` and ``end`` readings' niced share)."""
    share = niced_share((turn.get("start") or {}).get("cores"), (turn.get("end") or {}).get("cores"))
    return share is not None and share > SEARCH_SHARE


def quiet(picked: Sequence[int], searched: Collection[int]) -> list[int]:
    """``picked`` without the steps beside a search, or all of them where that leaves fewer than :data:`MIN_STEPS`."""
    left = [step for step in picked if step not in searched]
    return left if len(left) >= MIN_STEPS else list(picked)


def quiet_turns(turns: Sequence[dict]) -> list[dict]:
    """``turns`` without those beside a search, or all of them where that leaves none."""
    left = [turn for turn in turns if not searched_turn(turn)]
    return left or list(turns)


def searches_line(rows: Sequence[dict], peer_rows: dict) -> str | None:
    """One line for ``p2 demo``'s table: what was left out of which median, and the medians with it
    (None where nothing was)."""
    parts = [f"{row['name']} {row['search_steps']} steps ({row['with_searches_iteration_seconds'] * 1e3:.1f} ms "
             f"with them)" for row in rows if row.get("search_steps")]
    parts += [f"peer-{state} {row['search_turns']} of {row['turns']} turns "
              f"({row['with_searches_iteration_seconds'] * 1e3:.1f} ms with them)"
              for state, row in peer_rows.items() if row and row.get("search_turns")]
    if not parts:
        return None
    return ("left out of the medians, as beside one of the service's searches on the ranks' own cores: "
            + ", ".join(parts))
