"""What makes the replanning policy (:mod:`.policy`) act, as values with their
message text: the triggers of a search and the causes of a rollback. A
trigger's value is the word that actions, job events, metrics and the
dashboard carry (``RequestPlan.trigger``, ``RollBack.cause``, a pending
search's ``trigger``); the policy holds the enum and writes the word only there."""

from __future__ import annotations

from enum import Enum


class Trigger(Enum):
    """Each member: its word, the template of the reason it gives when it fires,
    and (for a latching trigger) of the note when it is armed again. The
    templates take the facts by name, numbers and versions already written out."""

    #: A cluster change (reported, or measured as drift) that no known plan answers.
    CLUSTER = ("cluster", "{due}; no known plan for it beats the running {running} ({median:.3f} s)")
    #: The first plan, after ``first_plan_after`` passthrough iterations.
    FIRST = ("first", "first plan after {passthrough} passthrough iterations (measured {median:.3f} s)")
    #: The running plan measures slower than predicted (``slow_trigger``, ``slow_clear``).
    SLOW = ("slow",
            "measured {median:.3f} s is {over} over the predicted {predicted:.3f} s of {running} for {streak} "
            "iterations",
            "measured {median:.3f} s is {over} over the predicted {predicted:.3f} s of {running}, below {clear} for "
            "{needed} iterations: the slow trigger is armed again")
    #: Dispatcher waits take too much of the iteration (Syndicate §4.4; ``wait_trigger``, ``wait_clear``).
    WAITS = ("waits",
             "dispatcher waits are {wait} of the iteration time (over {level}) for {streak} iterations",
             "dispatcher waits are {wait} of the iteration, below {clear} for {needed} iterations: the waits "
             "trigger is armed again")
    #: Passthrough runs far over its cluster state's bound after a plan was tried there (``bound_gap``).
    BOUND = ("bound", "{running} measures {median:.3f} s, {over} over the lower bound {bound:.3f} s of cluster "
                      "state {cluster}: a plan can gain that much; searching again with what the tried plan measured")
    #: An operator's "replan now".
    OPERATOR = ("operator", "an operator asked for a plan{reason}")
    #: A rollback to a plan known to be faster in this cluster state (``restore_gain``).
    RESTORE = ("restore", "{version} measured {seconds:.3f} s in cluster state {cluster}, {gain} faster than the "
                          "running {running}'s {median:.3f} s")
    #: A rollback of a committed plan that measured slower than the one before it (``rollback_margin``).
    TRIAL = ("trial", "{compare} (margin {margin}); rolling back to {previous}")

    def __new__(cls, word: str, fired: str, cleared: str = "") -> Trigger:
        member = object.__new__(cls)
        member._value_ = word
        member._fired = fired
        member._cleared = cleared
        return member

    def __str__(self) -> str:
        return self.value

    def reason(self, **facts: object) -> str:
        """Why it fired, from the facts its template names."""
        return self._fired.format(**facts)

    def cleared(self, **facts: object) -> str:
        """Why a latched trigger is armed again (a ``cleared`` note's reason)."""
        if not self._cleared:
            raise ValueError(f"the {self.value} trigger does not latch on a measured condition")
        return self._cleared.format(**facts)
