"""Before declaring a winner: re-launch the best config and the baseline, interleaved (B, A, B, A),
re-measure decode, and call it a win only when the gap beats the launch-to-launch noise.

Host drift (thermal, memory bandwidth decaying with uptime on GB10) moves both arms alike when they
alternate, so the comparison is fairer than trial-vs-trial numbers taken minutes apart. Each round
is one launch per arm; the test (noise.judge_launches) needs at least two rounds and pools the
spread of these launches with the one stored for this host, engine and objective.
"""

from __future__ import annotations

from collections.abc import Callable

from autotune.models import Confirmation, TrialResult
from autotune.noise import LaunchNoise, RatioJudgement, judge_launches
from autotune.trial import TrialContext, objective_only, run_trial

Sample = Callable[[TrialResult, float, str], None]


def decode_only(ctx: TrialContext) -> TrialContext:
    """A relaunch for a launch-noise sample: the objective alone, with the trial's decode passes."""
    return objective_only(ctx).model_copy(update={"accuracy": False})


def judge(best: list[float], base: list[float], prior: LaunchNoise | None, alpha: float) -> RatioJudgement:
    """Best vs baseline, one value per launch: winner only beyond the launch noise."""
    return judge_launches(best, base, prior, alpha)


def relaunch(
    ctx: TrialContext, arm: TrialResult, log_name: str, port: int, events: Callable[[str], None]
) -> float | None:
    """One decode-only launch of a measured config: its objective, or None when it failed."""
    result = run_trial(decode_only(ctx).model_copy(update={"port": port}), arm.candidate, arm.number, events,
                       log_name=log_name)
    return result.objective


def confirm(
    ctx: TrialContext,
    best: TrialResult,
    baseline: TrialResult,
    rounds: int,
    port_for: Callable[[], int],
    events: Callable[[str], None] = lambda _: None,
    prior: LaunchNoise | None = None,
    on_sample: Sample = lambda arm, value, source: None,
) -> Confirmation:
    samples: dict[int, list[float]] = {baseline.number: [], best.number: []}
    failed = False
    for round_ in range(rounds):
        for arm in (baseline, best):
            events(f"confirmation round {round_ + 1}/{rounds}: trial {arm.number}")
            value = relaunch(ctx, arm, f"confirm-r{round_ + 1}-trial-{arm.number:03d}", port_for(), events)
            if value is None:
                failed = True
                continue
            samples[arm.number].append(value)
            on_sample(arm, value, "confirm")
    best_s, base_s = samples[best.number], samples[baseline.number]
    alpha = ctx.space.objective.confirm_alpha
    result = judge(best_s, base_s, prior, alpha)
    if failed:
        verdict = f"no winner: a re-launch failed during confirmation ({result.why})"
        winner = False
    elif result.winner:
        verdict = f"winner: trial {best.number} is {result.why}, {rounds} interleaved rounds"
        winner = True
    elif result.why.startswith("not confirmed"):
        verdict = result.why
        winner = False
    else:
        verdict = f"no winner: {result.why}, {rounds} interleaved rounds"
        winner = False
    return Confirmation(
        study=ctx.study, best_trial=best.number, baseline_trial=baseline.number, rounds=rounds,
        best_samples=best_s, baseline_samples=base_s, ratio=round(result.ratio, 4), noise=round(result.sigma, 4),
        noise_df=result.df, t_statistic=result.t_statistic, critical=result.critical, alpha=alpha,
        winner=winner, verdict=verdict,
    )
