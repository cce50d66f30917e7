"""What a faster config trades away: every measured quantity on which it is worse than the baseline.

A study ranks by one objective (single-stream decode, or one wave's output), but a trial measures
more: TTFT, TPOT, cold prefill, concurrency waves, long-context decode. On the H200 a winner that
gained 2.3 % decode halved cold prefill and raised TTFT by 38 %: a user must be told. A quantity is a
trade-off when the best is worse on it than the baseline beyond two standard errors of the launch
noise for one launch of each (noise.single_launch_inside), judged with the objective's pooled noise,
the only launch-to-launch spread stored (other quantities may vary more or less between launches).
A space can make any of them a gate: `gates.max_regression`.
"""

from __future__ import annotations

from autotune.models import METRIC_FAMILIES, Better, GateOutcome, Measurement, TrialResult, TradeOff
from autotune.verdict.noise import LaunchNoise, single_launch_inside

GATE = "max_regression"


def family_of(name: str) -> str:
    return name.split(".", 1)[0]


def _compared(best: TrialResult, baseline: TrialResult) -> list[tuple[Measurement, Measurement, Better]]:
    pairs = []
    for mine in best.measurements:
        better = METRIC_FAMILIES.get(family_of(mine.name))
        theirs = baseline.measurement(mine.name)
        if better is not None and theirs is not None and mine.median > 0 and theirs.median > 0:
            pairs.append((mine, theirs, better))
    return pairs


def _tradeoff(mine: Measurement, theirs: Measurement, better: Better) -> TradeOff:
    return TradeOff(metric=mine.name, unit=mine.unit, condition=mine.condition, best=mine.median,
                    baseline=theirs.median, ratio=round(mine.median / theirs.median, 4), better=better)


def worse_than(ratio: float, limit: float, better: Better) -> bool:
    """A ratio to the baseline beyond `limit` on the losing side (below it where higher is better)."""
    return ratio < limit if better is Better.HIGHER else ratio > limit


def tradeoffs(best: TrialResult, baseline: TrialResult | None, noise: LaunchNoise | None) -> list[TradeOff]:
    """The measurements on which `best` is worse than `baseline` beyond the launch noise, worst first.
    Without a noise estimate nothing is called beyond it, so the list is empty."""
    if baseline is None or best.number == baseline.number or noise is None:
        return []
    out = [_tradeoff(mine, theirs, better) for mine, theirs, better in _compared(best, baseline)]
    out = [t for t in out if worse_than(t.ratio, 1.0, t.better) and single_launch_inside(t.ratio, noise) is False]
    return sorted(out, key=lambda t: -(1.0 / t.ratio if t.better is Better.HIGHER else t.ratio))  # worst first


def regression_gate(result: TrialResult, baseline: TrialResult | None, limits: dict[str, float]) -> GateOutcome:
    """`gates.max_regression`: each named quantity (a family or one measurement) within its ratio to
    the baseline: a floor where higher is better, a ceiling where lower is."""
    if baseline is None or baseline.status != "ok":
        return GateOutcome(gate=GATE, status="unchecked", detail="no baseline measured to compare with")
    if result.number == baseline.number:
        return GateOutcome(gate=GATE, status="pass", detail="the baseline itself")
    pairs = _compared(result, baseline)
    broken, seen = [], set()
    for name, limit in limits.items():
        matching = [(m, b, better) for m, b, better in pairs if m.name == name or family_of(m.name) == name]
        if not matching:
            return GateOutcome(gate=GATE, status="unchecked", detail=f"{name} not measured in this trial and the baseline")
        for mine, theirs, better in matching:
            seen.add(mine.name)
            ratio = mine.median / theirs.median
            if worse_than(ratio, limit, better):
                broken.append(f"{mine.name} x{ratio:.2f} vs limit x{limit:.2f}")
    if broken:
        return GateOutcome(gate=GATE, status="fail", detail="worse than the baseline allows: " + "; ".join(broken))
    return GateOutcome(gate=GATE, status="pass", detail=f"{len(seen)} measurement(s) within their limits to the baseline")
