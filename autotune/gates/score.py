"""Gates and ranking. A config that fails a gate can never be the best, whatever its speed.

Gates: needle retrieval must pass at every length and depth of the study's needle test; qeval must
not be worse than the reference (trial 0 of this study) by a one-sided exact McNemar test nor by
more than the margin; TTFT / TPOT SLOs when the space sets them; GPU J per output token and mean GPU power
(`max_gpu_j_per_token`, `max_power_w`, unchecked where no GPU energy is readable); `max_regression` (no quantity worse than the baseline
by more than the space allows). Each gate is pass, fail or
unchecked: missing evidence (not measured, no reference) is `unchecked`, and only `pass` on every
configured gate makes a trial eligible. Ranking: eligible trials by score (objective median minus
its noise), best first; capacities at an SLO within the bisection tolerance tie, broken by the
output tok/s at that capacity.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from enum import Enum

from autotune.bench.capacity import tied
from autotune.models import AccuracyFailure, GateOutcome, Gates, TrialResult
from autotune.gates.numerics import GATE as CLASS_GATE
from autotune.gates.numerics import class_gate
from autotune.verdict.tradeoffs import regression_gate


def unchecked(gate: str, why: str) -> GateOutcome:
    return GateOutcome(gate=gate, status="unchecked", detail=why)


def needle_gate(result: TrialResult) -> GateOutcome:
    report = result.needle
    if report is None or not report.cases:
        return unchecked("needle", "needle not measured")
    failed = [c for c in report.cases if not c.passed]
    if not failed:
        lengths = sorted({c.length_tokens for c in report.cases})
        return GateOutcome(gate="needle", status="pass", detail=f"all depths pass at {lengths} tokens")
    worst = ", ".join(f"{c.length_tokens} tok @ {c.depth:.0%}" for c in failed[:4])
    return GateOutcome(gate="needle", status="fail", detail=f"missed {len(failed)}/{len(report.cases)}: {worst}")


def _median_of(result: TrialResult, prefix: str) -> float | None:
    values = [m.median for m in result.measurements if m.name.startswith(prefix)]
    return statistics.median(values) if values else None


def slo_gate(result: TrialResult, prefix: str, limit: float, label: str) -> GateOutcome:
    value = _median_of(result, prefix)
    if value is None:
        return unchecked(label, f"{label} not measured")
    return GateOutcome(
        gate=label,
        status="pass" if value <= limit else "fail",
        detail=f"median {label} {value:.1f} ms vs limit {limit:.1f} ms",
    )


NOT_MEASURED = "not measured (no counter)"


def gpu_j_per_token_gate(result: TrialResult, limit: float) -> GateOutcome:
    """Every decode workload's GPU joules per output token at most `limit` (GPU energy only)."""
    energy = result.energy
    measured = [(w.workload, w.gpu_j_per_token) for w in (energy.workloads if energy else [])
                if w.gpu_j_per_token is not None]
    if not measured or (energy and energy.nodes_counted < energy.nodes):
        why = energy.absent if energy and energy.absent else NOT_MEASURED
        return unchecked("gpu_j_per_token", f"GPU J/token {why}")
    worst, value = max(measured, key=lambda x: x[1] or 0.0)
    return GateOutcome(gate="gpu_j_per_token", status="pass" if (value or 0.0) <= limit else "fail",
                       detail=f"worst {value:.4g} J/token ({worst}) vs limit {limit:g}; GPU energy only")


def power_gate(result: TrialResult, limit: float) -> GateOutcome:
    """Every workload's mean GPU power (the trial's GPUs summed) at most `limit` W."""
    energy = result.energy
    measured = [(w.workload, w.gpu.mean_power_w) for w in (energy.workloads if energy else []) if w.gpu is not None]
    if not measured:
        why = energy.absent if energy and energy.absent else NOT_MEASURED
        return unchecked("power", f"GPU power {why}")
    worst, value = max(measured, key=lambda x: x[1])
    return GateOutcome(gate="power", status="pass" if value <= limit else "fail",
                       detail=f"highest mean GPU power {value:.0f} W ({worst}) vs limit {limit:g} W")


def qeval_outcome(result: TrialResult, reference: TrialResult | None, gates: Gates) -> GateOutcome:
    from autotune.bench.qeval import qeval_gate

    assert gates.qeval is not None
    if result.qeval is None:
        return unchecked("qeval", "qeval not measured")
    if reference is None or reference.qeval is None:
        which = f"trial {reference.number}" if reference is not None else "the reference trial"
        return unchecked(
            "qeval", f"no reference: {which} of this study has no qeval result (name one: search --qeval-reference N)"
        )
    if reference.number == result.number:
        return GateOutcome(gate="qeval", status="pass", detail=f"reference ({result.qeval.correct}/{result.qeval.total})")
    return qeval_gate(result.qeval, reference.qeval, gates.qeval.alpha, gates.qeval.margin_tasks)


def evaluate_gates(
    result: TrialResult, reference: TrialResult | None, gates: Gates, accuracy: bool = True,
    baseline: TrialResult | None = None, failures: Sequence[AccuracyFailure] = (),
) -> list[GateOutcome]:
    """Every configured gate's outcome; `accuracy=False` (a throughput-only study) leaves out needle
    and qeval, and the recipe says accuracy is unchecked. `baseline` is what `max_regression`
    compares with (trial 0); `failures`, the numerics classes the study learned failed accuracy
    (autotune.gates.numerics): a trial of one without evidence of its own fails the `numerics class` gate."""
    if result.status != "ok":
        return []
    outcomes = []
    skipped = (f"skipped, dominated: {result.dominated}" if result.dominated
               else f"deferred: {result.deferred}" if result.deferred else None)
    measured = []
    # a skip covers the gates it left unmeasured (the qeval reference defers only its needle)
    if accuracy and gates.needle:
        measured.append(unchecked("needle", skipped) if skipped and result.needle is None else needle_gate(result))
    if accuracy and gates.qeval:
        measured.append(unchecked("qeval", skipped) if skipped and result.qeval is None
                        else qeval_outcome(result, reference, gates))
    notes = []
    if result.accuracy_from is not None and not skipped:
        notes.append(f" (reused from trial {result.accuracy_from}: differs only in numerics-neutral knobs)")
    if result.accuracy_relaunched and not skipped:
        notes.append(" (measured in a relaunch of this config at the end of the study: its gates had been deferred)")
    if notes:
        measured = [g.model_copy(update={"detail": f"{g.detail or ''}{''.join(notes)}"}) for g in measured]
    outcomes.extend(measured)
    learned = class_gate(result, measured, gates, list(failures)) if accuracy and failures else None
    if learned is not None:
        outcomes.append(learned)
    if gates.ttft_ms_max is not None:
        outcomes.append(slo_gate(result, "ttft_ms.", gates.ttft_ms_max, "ttft"))
    if gates.tpot_ms_max is not None:
        outcomes.append(slo_gate(result, "tpot_ms.", gates.tpot_ms_max, "tpot"))
    if gates.max_gpu_j_per_token is not None:
        outcomes.append(gpu_j_per_token_gate(result, gates.max_gpu_j_per_token))
    if gates.max_power_w is not None:
        outcomes.append(power_gate(result, gates.max_power_w))
    if gates.max_regression:
        outcomes.append(regression_gate(result, baseline, gates.max_regression))
    return outcomes


def constraint_values(result: TrialResult) -> dict[str, float]:
    """Optuna constraints (trial.set_constraint): <= 0 is feasible; one per gate. Gates a dominated
    or deferred trial skipped are unknown, not failed: the sampler still learns from its speed (the
    ranking never counts them as passed)."""
    skipped = bool(result.dominated or result.deferred)
    return {g.gate: 0.0 if g.passed or (skipped and g.status == "unchecked") else 1.0 for g in result.gates}


def accuracy_status(trial: TrialResult) -> str:
    """pass / fail / unchecked over the accuracy gates of a trial (unchecked when it has none)."""
    accuracy = [g for g in trial.gates if g.gate in ("needle", "qeval", CLASS_GATE)]
    if any(g.status == "fail" for g in accuracy):
        return "fail"
    if not accuracy or any(g.status == "unchecked" for g in accuracy):
        return "unchecked"
    return "pass"


def output_at_capacity(trial: TrialResult) -> float:
    """capacity_at_slo: the output tok/s of the level at the capacity (0 when there is none)."""
    head = trial.capacity.at_capacity if trial.capacity else None
    return head.output_tps if head else 0.0


def by_score(trials: list[TrialResult]) -> list[TrialResult]:
    """Best first by score. capacity_at_slo trials whose capacities are closer than the bisection
    tolerance are tied, and rank next by the output tok/s at their capacity: the head is the
    fastest of those tied with the highest capacity left, and so on down."""
    left = sorted(trials, key=lambda t: (-(t.score or 0.0), t.number))
    if not any(t.capacity for t in left):
        return left
    out: list[TrialResult] = []
    while left:
        top = int(left[0].score or 0)
        head = min((t for t in left if tied(top, int(t.score or 0))), key=lambda t: (-output_at_capacity(t), t.number))
        out.append(head)
        left.remove(head)
    return out


def rank(trials: list[TrialResult]) -> list[TrialResult]:
    return by_score([t for t in trials if t.feasible and t.score is not None])


class Standing(str, Enum):
    """Where a trial stands in the final table, decided from its record (`verdict` words it)."""

    SKIPPED = "skipped"
    INTERRUPTED = "interrupted"
    CRASHED = "crashed"
    ENVIRONMENT = "environment"
    FAILED = "failed"
    DOMINATED = "dominated"
    DEFERRED = "deferred"
    REJECTED = "rejected"
    UNCHECKED = "unchecked"
    OK = "ok"


def standing(trial: TrialResult) -> Standing:
    """The trial's place: its status when it did not run to the end, else what its gates say."""
    if trial.status != "ok":
        return Standing(trial.status)
    if trial.dominated:
        return Standing.DOMINATED
    if trial.deferred:
        return Standing.DEFERRED
    if any(g.status == "fail" for g in trial.gates):
        return Standing.REJECTED
    if any(g.status == "unchecked" for g in trial.gates):
        return Standing.UNCHECKED
    return Standing.OK


def verdict(trial: TrialResult) -> str:
    """Why a trial is where it is in the final table, in a few words."""
    place = standing(trial)
    if place in (Standing.SKIPPED, Standing.INTERRUPTED, Standing.CRASHED):
        return f"{place.value}: {trial.reason}"
    if place in (Standing.FAILED, Standing.ENVIRONMENT):
        cls = trial.failure.failure_class if trial.failure else "failed"
        reason = (trial.reason or "").removeprefix(f"{cls}: ")
        if place is Standing.ENVIRONMENT:
            return f"environment ({cls}, every candidate failed so; retried on resume): {reason}"
        return f"failed ({cls}): {reason}"
    if place is Standing.DOMINATED:
        return f"dominated: {trial.dominated}"
    if place is Standing.DEFERRED:
        return f"gates deferred, not run: {trial.deferred}"
    if place is Standing.REJECTED:
        return "rejected: " + "; ".join(f"{g.gate} gate ({g.detail})" for g in trial.gates if g.status == "fail")
    if place is Standing.UNCHECKED:
        return "unchecked: " + "; ".join(f"{g.gate} gate ({g.detail})" for g in trial.gates if g.status == "unchecked")
    return "ok"
