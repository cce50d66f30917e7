"""Accuracy only where it can matter: a candidate whose throughput cannot beat the incumbent
within launch noise can never be the best, so it skips the gates and is recorded as `dominated`.

"Cannot beat within noise" uses the same rule `show` applies to two single launches
(noise.single_launch_limit): the candidate's objective is below the incumbent's by more than two
standard errors of the launch-to-launch spread of this host and engine. Unknown noise (nothing
launched twice here yet) dominates nothing: the gates run.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from autotune.models import TrialResult
from autotune.noise import LaunchNoise, single_launch_limit

#: objective -> why the gates are skipped, or None to run them
DominatedCheck = Callable[[float], str | None]


def dominated_check(incumbent: TrialResult | None, noise: LaunchNoise | None) -> DominatedCheck | None:
    if incumbent is None or noise is None or not incumbent.objective:
        return None
    best = incumbent.objective
    limit = single_launch_limit(noise)

    def check(objective: float) -> str | None:
        if objective <= 0 or math.log(best / objective) <= limit:
            return None
        return (
            f"{objective:.1f} vs incumbent trial {incumbent.number} {best:.1f}: x{objective / best:.2f}, "
            f"below it beyond the launch noise ({noise.describe()}, 2 standard errors); gates skipped"
        )

    return check
