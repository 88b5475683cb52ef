"""One watched condition's hysteresis as a value: how many observations in a
row crossed its level, and whether it fired and waits to clear. The
replanning policy (:mod:`.policy`) holds one per condition it watches on the
running plan's medians; a step returns a new value, nothing is mutated."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Hysteresis:
    """Armed (``latched`` False), ``streak`` counts observations above the
    trigger level in a row, and the condition fires once ``needed`` are counted.
    When that led to a search the policy latches it; latched, ``streak`` counts
    observations below the (lower) clear level in a row, and ``needed`` of them
    re-arm it. A value between the two levels neither fires nor clears, so a
    median that hovers at the trigger level costs one search, not one per cooldown."""

    latched: bool = False
    streak: int = 0

    def observe(self, value: float, trigger: float, clear: float, needed: int) -> tuple[Hysteresis, bool]:
        """The state after one more observation, and whether it re-armed (a latched condition cleared)."""
        if not self.latched:
            return self.count(value > trigger), False
        streak = self.streak + 1 if value < clear else 0
        if streak >= needed:
            return Hysteresis(), True
        return Hysteresis(True, streak), False

    def count(self, over: bool) -> Hysteresis:
        """An armed condition after one more observation (``over``: above its level); for
        conditions that are watched without a clear level (their action restarts the measurement)."""
        return replace(self, streak=self.streak + 1 if over else 0)

    def fired(self, needed: int) -> bool:
        """Armed, and ``needed`` observations in a row were above the level."""
        return not self.latched and self.streak >= needed

    def latch(self) -> Hysteresis:
        """It fired and led to a search: it fires no more until it clears."""
        return Hysteresis(latched=True)

    def release(self) -> Hysteresis:
        """Armed again at once (what it led to failed, so it may be retried)."""
        return replace(self, latched=False)

    def restart(self) -> Hysteresis:
        """Count from zero (the measurement it watches started again); a latch stays."""
        return replace(self, streak=0)
