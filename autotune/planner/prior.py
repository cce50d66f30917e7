"""The planner's prior for a new study's first trials: candidates by predicted speed, best first,
with predictions closer than the planner can tell apart taken as ties."""

from __future__ import annotations

import math
from collections.abc import Callable

from autotune.models import Candidate, HardwareProfile, SearchSpace
from autotune.planner.roofline import estimate
from autotune.space.candidates import baseline

#: predictions closer than this (relative) are ties: below what the roofline planner can tell apart
PLANNER_TIE = 0.05


def planner_order(space: SearchSpace, hardware: HardwareProfile, nodes: int) -> Callable[[list[Candidate]], list[Candidate]]:
    """The planner's prior for the first trials: candidates by predicted decode tok/s (an
    output_tps_cN objective: predicted output tok/s at N streams), best first.
    Predictions within PLANNER_TIE of each other are ties (bands of that width down from the best),
    and among ties the candidate that changes fewer knobs from the baseline comes first: the
    planner's gain is the same, and each extra untested change is one more way to fail."""
    base = baseline(space)
    objective = space.objective
    level = objective.concurrency if not objective.gpu_energy else None

    def predicted(candidate: Candidate) -> float:
        est = estimate(space, candidate, hardware, nodes)
        return (est.output_tps_at(level) if level else est.decode_tps) or 0.0

    def changes(candidate: Candidate) -> int:
        return sum(1 for k in space.knobs if candidate.params.get(k.name, candidate.env.get(k.name))
                   != base.params.get(k.name, base.env.get(k.name)))

    def order(candidates: list[Candidate]) -> list[Candidate]:
        scored = [(predicted(c), c) for c in candidates]
        top = max((tps for tps, _ in scored), default=0.0)

        def band(tps: float) -> int:
            return int(math.log(top / tps) / math.log(1 + PLANNER_TIE)) if tps > 0 and top > 0 else 10**6

        return [c for _, c in sorted(scored, key=lambda x: (band(x[0]), changes(x[1])))]

    return order
