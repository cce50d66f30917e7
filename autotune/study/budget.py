"""The study's wall-clock budget for launches, and what a typical trial takes."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from autotune.models import TrialResult


class TimeBudget:
    """A wall-clock budget for launches: the next one starts only if a typical one still fits."""

    def __init__(self, seconds: float | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self.clock = clock
        self.started = clock()

    def left_s(self) -> float:
        return float("inf") if self.seconds is None else self.seconds - (self.clock() - self.started)

    def how_many_fit(self, wanted: int, each_s: float | None) -> int:
        """How many of `wanted` launches of ~`each_s` seconds fit in what is left."""
        if self.seconds is None or not each_s:
            return wanted
        return max(0, min(wanted, int(self.left_s() // each_s)))

    def refusal(self, expected_s: float | None, what: str = "a trial") -> str | None:
        """Why the next launch does not fit, or None when it does (or nothing is known yet)."""
        if self.seconds is None or expected_s is None or expected_s <= self.left_s():
            return None
        return f"time budget: {max(0.0, self.left_s()):.0f} s left, {what} takes ~{expected_s:.0f} s here"


def typical_trial_s(trials: list[TrialResult]) -> float | None:
    """Median wall time of the trials so far whose engine served (None before the first): a start
    that failed in seconds is not what the next launch will take."""
    durations = [t.duration_s for t in trials if t.status != "skipped" and t.served and t.duration_s]
    return statistics.median(durations) if durations else None
