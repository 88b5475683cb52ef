"""The in-band switch check: where two-phase commit meets the training loop.

Syndicate §5 switches "from the subsequent training iteration" once 2PC
completes; but ranks learn that at different times, and a message can be lost.
So the switch is agreed among the ranks themselves, on the inner backend:

* plans switch only at *check boundaries* ``b`` (``b % switch_every == 0``;
  ``switch_every`` is a job setting every rank knows before it starts);
* at every check boundary EVERY rank runs the same tiny collective — MIN over
  ranks of one integer, its :func:`proposal` — whether or not it heard of any
  commit, so no rank ever skips a collective the others enter;
* every rank applies the result with :func:`agree`: all switch to the common
  version, or none does.

The enforcer pipelines the MIN (:mod:`enforcer.link.switching`): the one that
decides boundary ``b`` is started at the check before, with every rank's
:func:`proposal` for ``b``, and applied at ``b``; the functions here are the same
either way (PROTOCOL.md §3 says why that is as safe).

Why every rank holds the common version built (so :func:`agree` never raises)
is argued in PROTOCOL.md §4.1; :class:`SwitchError` is what a broken
protocol would look like, and the job must stop rather than run mixed plans.
"""

from __future__ import annotations

from dataclasses import replace

from optimizer_service.control.participant import Action, Discard, Participant, SwitchTo


class SwitchError(RuntimeError):
    """The ranks agreed on a version this rank cannot run: the protocol's
    safety argument was broken. Continuing would run different plans on
    different ranks, so the enforcer fails the job instead."""


def is_check(iteration: int, every: int) -> bool:
    """Whether the boundary before ``iteration`` is a check boundary."""
    if every < 1:
        raise ValueError(f"switch_every must be >= 1, got {every}")
    return iteration % every == 0


def proposal(state: Participant, boundary: int) -> int:
    """This rank's input to the MIN at ``boundary``: the newest version it holds
    committed AND built whose switch iteration is due, else what it runs (a
    proposal is never below ``state.running``)."""
    due = [v for v, e in state.prepared.items()
           if e.committed and e.built is True and e.switch_iteration <= boundary]
    return max([state.running, *due])


def agree(state: Participant, boundary: int, common: int) -> tuple[Participant, list[Action]]:
    """Apply the MIN of all ranks' proposals at ``boundary``: switch to
    ``common`` when it is newer than the running plan, and discard every held
    version below it (no rank can ever agree on one of those again)."""
    if common < state.running:
        raise SwitchError(f"rank {state.rank}: the ranks agreed on plan v{common} at iteration {boundary}, below "
                          f"the running plan v{state.running}: they were not running the same plan")
    actions: list[Action] = []
    prepared = dict(state.prepared)
    running = state.running
    if common > running:
        entry = prepared.pop(common, None)
        if entry is None or not (entry.committed and entry.built is True):
            have = "does not hold it" if entry is None else f"holds it {_condition(entry)}"
            raise SwitchError(f"rank {state.rank} must switch to plan v{common} at iteration {boundary} but {have}")
        actions.append(SwitchTo(common))
        running = common
    for version in sorted(v for v in prepared if v < common):
        if prepared.pop(version).built is not False:
            actions.append(Discard(version))
    return replace(state, running=running, prepared=prepared), actions


def _condition(entry) -> str:
    built = {None: "still building", True: "built", False: "unbuilt (its build failed)"}[entry.built]
    return f"{built} and {'committed' if entry.committed else 'not committed'}"
