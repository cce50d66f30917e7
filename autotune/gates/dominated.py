"""Accuracy only where it can matter. The study ranks the trials that pass their gates by score
(score.rank), so a candidate whose score is not above the incumbent's can never rank first in
this study: its gates would not change the pick. It keeps its numbers, skips the gates and is
recorded as `dominated`, with the reason saying how far below it is: beyond the launch noise of
this host and engine (two standard errors of a ratio of single launches, noise.single_launch_limit),
inside it (tied at best, which `show` still lists), or with the noise not measured here yet.

The qeval reference always takes its gates, and an incumbent is a trial that passed its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from enum import Enum

from pydantic import BaseModel, ConfigDict

from autotune.bench.capacity import tied
from autotune.models import TrialResult
from autotune.verdict.noise import LaunchNoise, single_launch_limit


class SkipKind(str, Enum):
    DOMINATED = "dominated"  # its score cannot rank first: the gates would not change the pick
    DEFERRED = "deferred"  # faster than the incumbent: its gates run at the end (autotune.study.deferred)


class GatesSkipped(BaseModel):
    """Why a trial's gates do not run in its own launch; `why` is the sentence people read."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: SkipKind
    why: str

    def fields(self) -> dict[str, str]:
        """The TrialResult field that records it: `dominated` or `deferred`."""
        return {self.kind.value: self.why}


#: (objective, score) -> why the gates are skipped, or None to run them
DominatedCheck = Callable[[float, float], GatesSkipped | None]


def dominated_check(
    incumbent: TrialResult | None, noise: LaunchNoise | None, incumbent_unchecked: bool = False
) -> DominatedCheck | None:
    """`incumbent_unchecked`: the incumbent's own gates are deferred (autotune.study.deferred), so this
    trial ranks first only if they fail, and then its gates run at the end."""
    if incumbent is None or not incumbent.objective or incumbent.score is None:
        return None
    best, best_score = incumbent.objective, incumbent.score
    tail = (f"its score ranks first only if trial {incumbent.number} fails its deferred gates, so its own run only then"
            if incumbent_unchecked else "its score cannot rank first, so the gates were skipped")

    def check(objective: float, score: float) -> GatesSkipped | None:
        if objective <= 0 or score > best_score:
            return None
        if incumbent.capacity is not None and tied(int(objective), int(best)):
            return None  # a tied capacity ranks by its output tok/s, which this check is not told: gate it

        gap = f"{objective:.1f} vs incumbent trial {incumbent.number} {best:.1f}: x{objective / best:.2f}"
        if noise is None:
            where = "launch noise not measured on this host yet"
        elif math.log(best / objective) > single_launch_limit(noise):
            where = f"below it beyond the launch noise ({noise.describe()}, 2 standard errors)"
        else:
            where = f"inside the launch noise ({noise.describe()}): tied at best"
        return GatesSkipped(kind=SkipKind.DOMINATED, why=f"{gap}, {where}; {tail}")

    return check
