"""Gates and ranking. A config that fails a gate can never be the best, whatever its speed.

Gates: needle retrieval must pass at every configured length and depth; qeval must not be
significantly worse than the baseline (exact McNemar); TTFT / TPOT SLOs when the space sets them.
Ranking: feasible trials by score (objective median minus its noise), best first.
"""

from __future__ import annotations

import statistics

from autotune.models import GateOutcome, Gates, TrialResult


def needle_gate(result: TrialResult) -> GateOutcome:
    report = result.needle
    assert report is not None
    failed = [c for c in report.cases if not c.passed]
    if not failed:
        lengths = sorted({c.length_tokens for c in report.cases})
        return GateOutcome(gate="needle", passed=True, detail=f"all depths pass at {lengths} tokens")
    worst = ", ".join(f"{c.length_tokens} tok @ {c.depth:.0%}" for c in failed[:4])
    return GateOutcome(gate="needle", passed=False, detail=f"missed {len(failed)}/{len(report.cases)}: {worst}")


def _median_of(result: TrialResult, prefix: str) -> float | None:
    values = [m.median for m in result.measurements if m.name.startswith(prefix)]
    return statistics.median(values) if values else None


def slo_gate(result: TrialResult, prefix: str, limit: float, label: str) -> GateOutcome:
    value = _median_of(result, prefix)
    if value is None:
        return GateOutcome(gate=label, passed=False, detail=f"{label} not measured")
    return GateOutcome(
        gate=label, passed=value <= limit, detail=f"median {label} {value:.1f} ms vs limit {limit:.1f} ms"
    )


def evaluate_gates(result: TrialResult, baseline: TrialResult | None, gates: Gates) -> list[GateOutcome]:
    from autotune.bench.qeval import qeval_gate

    if result.status != "ok":
        return []
    outcomes = []
    if gates.needle and result.needle:
        outcomes.append(needle_gate(result))
    if gates.qeval and result.qeval:
        if baseline is None or baseline.qeval is None or baseline.number == result.number:
            outcomes.append(
                GateOutcome(gate="qeval", passed=True, detail=f"reference ({result.qeval.correct}/{result.qeval.total})")
            )
        else:
            outcomes.append(qeval_gate(result.qeval, baseline.qeval, gates.qeval.alpha))
    if gates.ttft_ms_max is not None:
        outcomes.append(slo_gate(result, "ttft_ms.", gates.ttft_ms_max, "ttft"))
    if gates.tpot_ms_max is not None:
        outcomes.append(slo_gate(result, "tpot_ms.", gates.tpot_ms_max, "tpot"))
    return outcomes


def constraint_values(result: TrialResult) -> dict[str, float]:
    """Optuna constraints (trial.set_constraint): <= 0 is feasible; one per gate."""
    return {g.gate: 0.0 if g.passed else 1.0 for g in result.gates}


def rank(trials: list[TrialResult]) -> list[TrialResult]:
    feasible = [t for t in trials if t.feasible and t.score is not None]
    return sorted(feasible, key=lambda t: (-(t.score or 0.0), t.number))


def verdict(trial: TrialResult) -> str:
    """Why a trial is where it is in the final table, in a few words."""
    if trial.status == "skipped":
        return f"skipped: {trial.reason}"
    if trial.status in ("interrupted", "crashed"):
        return f"{trial.status}: {trial.reason}"
    if trial.status == "failed":
        cls = trial.failure.failure_class if trial.failure else "failed"
        reason = (trial.reason or "").removeprefix(f"{cls}: ")
        return f"failed ({cls}): {reason}"
    failed = [g for g in trial.gates if not g.passed]
    if failed:
        return "rejected: " + "; ".join(f"{g.gate} gate ({g.detail})" for g in failed)
    return "ok"
