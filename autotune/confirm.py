"""Before declaring a winner: re-launch the best config and the baseline, interleaved (B, A, B, A),
re-measure decode, and call it a win only when the gap is larger than the noise.

Host drift (thermal, memory bandwidth decaying with uptime on GB10) moves both arms alike when they
alternate, so the comparison is fairer than trial-vs-trial numbers taken minutes apart.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

from autotune.models import Confirmation, TrialResult, mad
from autotune.trial import TrialContext, run_trial


def decode_only(ctx: TrialContext) -> TrialContext:
    workload = ctx.space.workload.model_copy(update={"prefill_tokens": [], "concurrency": [1]})
    return ctx.model_copy(update={"space": ctx.space.model_copy(update={"workload": workload}), "accuracy": False})


def judge(best: list[float], base: list[float]) -> tuple[float, float, bool]:
    """(ratio of medians, relative noise of the two arms, winner?)."""
    best_med, base_med = statistics.median(best), statistics.median(base)
    noise = 1.4826 * (mad(best) / best_med + mad(base) / base_med)
    ratio = best_med / base_med
    separated = min(best) > max(base)
    return ratio, noise, separated and ratio - 1.0 > noise


def confirm(
    ctx: TrialContext,
    best: TrialResult,
    baseline: TrialResult,
    rounds: int,
    port_for: Callable[[], int],
    events: Callable[[str], None] = lambda _: None,
) -> Confirmation:
    quick = decode_only(ctx)
    samples: dict[int, list[float]] = {baseline.number: [], best.number: []}
    for round_ in range(rounds):
        for arm in (baseline, best):
            events(f"confirmation round {round_ + 1}/{rounds}: trial {arm.number}")
            result = run_trial(
                quick.model_copy(update={"port": port_for()}),
                arm.candidate,
                arm.number,
                events,
                log_name=f"confirm-r{round_ + 1}-trial-{arm.number:03d}",
            )
            if result.objective is not None:
                samples[arm.number].append(result.objective)
    best_s, base_s = samples[best.number], samples[baseline.number]
    if not best_s or not base_s:
        return Confirmation(
            study=ctx.study, best_trial=best.number, baseline_trial=baseline.number, rounds=rounds,
            best_samples=best_s, baseline_samples=base_s, ratio=0.0, noise=0.0, winner=False,
            verdict="no winner: a re-launch failed during confirmation",
        )
    ratio, noise, winner = judge(best_s, base_s)
    verdict = (
        f"winner: trial {best.number} is x{ratio:.2f} the baseline (noise ±{noise:.1%}, {rounds} interleaved rounds)"
        if winner
        else f"no winner: x{ratio:.2f} is inside the noise (±{noise:.1%}) or the arms overlap over {rounds} rounds"
    )
    return Confirmation(
        study=ctx.study, best_trial=best.number, baseline_trial=baseline.number, rounds=rounds,
        best_samples=best_s, baseline_samples=base_s, ratio=round(ratio, 4), noise=round(noise, 4),
        winner=winner, verdict=verdict,
    )
