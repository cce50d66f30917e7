"""A confirmation's verdict: the best config's relaunches against the baseline's, judged by the
launch noise (the relaunches themselves are run by autotune/study/confirm.py)."""

from __future__ import annotations

from autotune.models import Confirmation, ConfirmationLaunch, TrialResult, VerdictStatus
from autotune.verdict.noise import LaunchNoise, RatioJudgement, judge_launches


def judge(best: list[float], base: list[float], prior: LaunchNoise | None, alpha: float) -> RatioJudgement:
    """Best vs baseline, one value per launch: winner only beyond the launch noise."""
    return judge_launches(best, base, prior, alpha)


def rounds_done(launches: list[ConfirmationLaunch]) -> int:
    """Rounds of a pair already run (a round with a failed relaunch counts: it was run)."""
    return max((launch.round for launch in launches), default=0)


def verdict_of(
    study: str,
    best: TrialResult,
    baseline: TrialResult,
    launches: list[ConfirmationLaunch],
    prior: LaunchNoise | None,
    alpha: float,
    rounds_now: int,
    slowed: frozenset[int] = frozenset(),
) -> Confirmation:
    """The verdict on every stored round of one pair; `prior` must not hold these launches; `slowed`:
    launch samples measured on a slowed GPU (autotune/verdict/gpu_state.py), which the verdict names."""
    best_s = [x.objective for x in launches if x.trial == best.number and x.objective is not None]
    base_s = [x.objective for x in launches if x.trial == baseline.number and x.objective is not None]
    failed = any(x.objective is None for x in launches)
    rounds = rounds_done(launches)
    earlier = rounds - rounds_now
    span = f"{rounds} interleaved rounds" + (f" ({earlier} of them in earlier sittings)" if earlier > 0 else "")
    result = judge(best_s, base_s, prior, alpha)
    status = VerdictStatus.NO_WINNER if failed else result.status
    if failed:
        verdict = f"no winner: a re-launch failed during confirmation ({result.why})"
    elif status is VerdictStatus.WINNER:
        verdict = f"winner: trial {best.number} is {result.why}, {span}"
    elif status is VerdictStatus.NOT_CONFIRMED:
        verdict = f"{result.why} ({span} so far; a resume runs the rest)" if rounds else result.why
    else:
        verdict = f"no winner: {result.why}, {span}"
    on_slowed = [x for x in launches if x.sample_id is not None and x.sample_id in slowed]
    if on_slowed:
        verdict += (f"; {len(on_slowed)} of these launches ran on a slowed GPU (throttled or low clocks): "
                    "left out of the host's launch-noise estimate")
    return Confirmation(
        study=study, best_trial=best.number, baseline_trial=baseline.number, rounds=rounds, rounds_now=rounds_now,
        launches=[x.id for x in launches], best_samples=best_s, baseline_samples=base_s,
        ratio=round(result.ratio, 4), noise=round(result.sigma, 4), noise_df=result.df,
        t_statistic=result.t_statistic, critical=result.critical, alpha=alpha,
        winner=status is VerdictStatus.WINNER, status=status, verdict=verdict,
    )
