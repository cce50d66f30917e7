"""Launch-to-launch noise: the spread that judges every ratio autotune reports.

Passes inside one launch agree within 1-3 %, while the same config relaunched can move by tens of
percent (measured on the H200: 353 then 501 tok/s). So a ratio is judged against the spread between
launches of one config, estimated on this host and engine from every config that was launched more
than once (the baseline's noise relaunch, each confirmation round), pooled over the studies with
the same objective metric (a wave of 8 streams does not vary as one stream's decode does):

    sigma = sqrt( sum over groups g, launches i of (ln x_gi - mean_g ln x)^2 / sum over g of (n_g - 1) )

A group is one candidate in one study (same workload), so differences between configs or workloads
never count as noise. `sigma` is a relative spread (0.05 ~ ±5 %); `df` is its degrees of freedom.
"""

from __future__ import annotations

import math
import statistics

from pydantic import BaseModel, ConfigDict

from autotune.models import VerdictStatus

# one-sided Student t quantiles t(1 - alpha, df) for the alphas a space may set; df > 30 uses 30's
_T_QUANTILES: dict[float, list[float]] = {
    0.05: [6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812, 1.796, 1.782, 1.771,
           1.761, 1.753, 1.746, 1.740, 1.734, 1.729, 1.725, 1.721, 1.717, 1.714, 1.711, 1.708, 1.706,
           1.703, 1.701, 1.699, 1.697],
    0.01: [31.821, 6.965, 4.541, 3.747, 3.365, 3.143, 2.998, 2.896, 2.821, 2.764, 2.718, 2.681, 2.650,
           2.624, 2.602, 2.583, 2.567, 2.552, 2.539, 2.528, 2.518, 2.508, 2.500, 2.492, 2.485, 2.479,
           2.473, 2.467, 2.462, 2.457],
}

MIN_ROUNDS = 2  # launches per arm: one launch of each says nothing about the spread between launches


def t_quantile(alpha: float, df: int) -> float:
    if alpha not in _T_QUANTILES:
        raise ValueError(f"confirmation alpha must be one of {sorted(_T_QUANTILES)}, got {alpha}")
    if df < 1:
        raise ValueError("a t quantile needs at least one degree of freedom")
    table = _T_QUANTILES[alpha]
    return table[min(df, len(table)) - 1]


class NoiseKey(BaseModel):
    """Whose launch-to-launch noise a sample joins and a verdict reads: one host (its key in
    runs.db), one engine, one objective metric."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str
    engine: str
    metric: str


class LaunchNoise(BaseModel):
    """The pooled launch-to-launch spread of the objective (relative, log scale)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sigma: float
    df: int
    groups: int
    launches: int

    def describe(self) -> str:
        return f"±{self.sigma:.1%} launch-to-launch ({self.launches} launches of {self.groups} configs, df {self.df})"


def pooled(groups: list[list[float]]) -> LaunchNoise | None:
    """The pooled spread of several groups of repeated launches (None when nothing was repeated)."""
    squares, df, used, launches = 0.0, 0, 0, 0
    for values in groups:
        logs = [math.log(v) for v in values if v > 0]
        if len(logs) < 2:
            continue
        mean = statistics.fmean(logs)
        squares += sum((x - mean) ** 2 for x in logs)
        df += len(logs) - 1
        used += 1
        launches += len(logs)
    if df == 0:
        return None
    return LaunchNoise(sigma=math.sqrt(squares / df), df=df, groups=used, launches=launches)


class RatioJudgement(BaseModel):
    """Is arm A faster than arm B beyond the launch-to-launch noise?"""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ratio: float
    sigma: float = 0.0
    df: int = 0
    t_statistic: float | None = None
    critical: float | None = None
    alpha: float
    winner: bool
    status: VerdictStatus
    why: str


def judge_launches(best: list[float], base: list[float], prior: LaunchNoise | None, alpha: float) -> RatioJudgement:
    """One-sided t test on log objectives, each value one launch. The spread pools the arms' own
    samples with the stored estimate of this host (prior), so a lucky quiet pair cannot shrink it."""
    ratio = statistics.median(best) / statistics.median(base) if best and base else 0.0
    if min(len(best), len(base)) < MIN_ROUNDS:
        return RatioJudgement(
            ratio=ratio, alpha=alpha, winner=False, status=VerdictStatus.NOT_CONFIRMED,
            why=f"not confirmed: {len(best)} vs {len(base)} launches; a verdict needs at least {MIN_ROUNDS} of each",
        )
    here = pooled([best, base])
    parts = [p for p in (here, prior) if p is not None]
    df = sum(p.df for p in parts)
    sigma = math.sqrt(sum(p.sigma**2 * p.df for p in parts) / df)
    diff = statistics.fmean(math.log(v) for v in best) - statistics.fmean(math.log(v) for v in base)
    se = sigma * math.sqrt(1 / len(best) + 1 / len(base))
    critical = t_quantile(alpha, df)
    t_stat = diff / se if se > 0 else (math.inf if diff > 0 else 0.0)
    winner = t_stat > critical
    why = (
        f"x{ratio:.2f} beyond the noise: t={t_stat:.2f} > {critical:.2f} (one-sided alpha {alpha}, "
        f"launch noise ±{sigma:.1%}, df {df})"
        if winner
        else f"x{ratio:.2f} is inside the noise: t={t_stat:.2f} <= {critical:.2f} (one-sided alpha {alpha}, "
        f"launch noise ±{sigma:.1%}, df {df})"
    )
    return RatioJudgement(
        ratio=ratio, sigma=sigma, df=df, t_statistic=round(t_stat, 4) if math.isfinite(t_stat) else None,
        critical=critical, alpha=alpha, winner=winner,
        status=VerdictStatus.WINNER if winner else VerdictStatus.NO_WINNER, why=why,
    )


def single_launch_verdict(ratio: float, noise: LaunchNoise | None) -> str:
    """`single_launch_inside` in words, as the reports print it."""
    return {None: "not judged", True: "inside the noise", False: "beyond the noise"}[single_launch_inside(ratio, noise)]


def single_launch_limit(noise: LaunchNoise) -> float:
    """Two standard errors of log(a / b) for one launch of each: the widest gap the noise explains."""
    return 2.0 * noise.sigma * math.sqrt(2.0)


def single_launch_inside(ratio: float, noise: LaunchNoise | None) -> bool | None:
    """For two single launches (a trial vs the baseline): is the ratio within two standard errors of
    the launch noise? None when the noise is unknown."""
    if noise is None or ratio <= 0:
        return None
    return abs(math.log(ratio)) <= single_launch_limit(noise)
