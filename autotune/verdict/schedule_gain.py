"""A draft schedule's verdict: its one launch against the best single K, level by level, each gap
held to the host's launch noise by the rule for two single launches (autotune/verdict/noise.py)."""

from __future__ import annotations

from autotune.models import ScheduleLevel, ScheduleStatus
from autotune.verdict.noise import LaunchNoise, single_launch_inside


def ratio_of(level: ScheduleLevel) -> float | None:
    """The schedule's tok/s over the best single K's at this level (None: one is missing)."""
    if not level.schedule_tps or not level.single_k_tps:
        return None
    return level.schedule_tps / level.single_k_tps


def judge_levels(
    levels: list[ScheduleLevel], noise: LaunchNoise | None
) -> tuple[list[ScheduleLevel], ScheduleStatus, str]:
    """Each level with `beyond_noise` set, the status, and why. Adopted: faster beyond the noise at
    one level at least and slower beyond it at none."""
    ratios = {x.concurrency: ratio_of(x) for x in levels}
    judged = []
    for level in levels:
        ratio = ratios[level.concurrency]
        inside = single_launch_inside(ratio, noise) if ratio else None
        judged.append(level.model_copy(update={"beyond_noise": None if inside is None else not inside}))
    missing = [c for c, r in ratios.items() if r is None]
    if missing:
        return judged, ScheduleStatus.UNCONFIRMED, f"no number at concurrency {', '.join(map(str, missing))}"
    if noise is None:
        return judged, ScheduleStatus.UNCONFIRMED, "the launch noise of this host is not known yet"
    shown = ", ".join(f"c{c} x{r:.2f}" for c, r in ratios.items() if r is not None)
    worse = [x.concurrency for x in judged if x.beyond_noise and (ratios[x.concurrency] or 0) < 1]
    better = [x.concurrency for x in judged if x.beyond_noise and (ratios[x.concurrency] or 0) > 1]
    where = f"one launch against the best single K ({shown}; launch noise ±{noise.sigma:.1%})"
    if worse:
        return judged, ScheduleStatus.REJECTED, f"slower beyond the noise at concurrency {worse}: {where}"
    if better:
        return judged, ScheduleStatus.ADOPTED, f"faster beyond the noise at concurrency {better}: {where}"
    return judged, ScheduleStatus.NO_GAIN, f"inside the noise at every level: {where}"
