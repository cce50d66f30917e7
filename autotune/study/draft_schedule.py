"""A draft length per batch size (vLLM's `num_speculative_tokens_per_batch_size`), composed from
the study's own trials: a candidate that drafts K tokens is measured at every concurrency level of
the workload in one launch, so for the best config the trials that differ from it only in draft_k
say which K is fastest at each level. The schedule takes that K from each measured level up to the
next one, is launched once (the same decode and concurrency passes) and is judged against the best
single K level by level (autotune/verdict/schedule_gain.py).
"""

from __future__ import annotations

from collections.abc import Callable

from autotune.models import (
    SCHEDULE_KEY,
    Candidate,
    ChoicesCheck,
    ChoicesStatus,
    DraftSchedule,
    DraftScheduleReport,
    DraftStep,
    GatePolicy,
    ScheduleLevel,
    ScheduleStatus,
    SearchSpace,
    TrialResult,
    tps_measurement,
)
from autotune.trial.context import TrialContext, objective_only
from autotune.trial.launch import LaunchRequest, Purpose
from autotune.verdict.schedule_gain import judge_levels
from autotune.verdict.noise import LaunchNoise

NoiseOf = Callable[[], LaunchNoise | None]

KNOBS = ("draft_k", "draft_schedule")


def level_metric(level: int) -> str:
    """The measurement of one concurrency level: single-stream decode at 1, a wave's output above."""
    return "decode_tps" if level <= 1 else tps_measurement(f"c{level}")


def tps_at(trial: TrialResult, level: int) -> float | None:
    """Output tok/s of `trial` at concurrency `level` (None: not measured)."""
    if level <= 1:
        return trial.single_stream_decode_tps()
    found = trial.measurement(level_metric(level))
    return found.median if found is not None and found.median > 0 else None


def refusal(space: SearchSpace, choices: ChoicesCheck | None) -> DraftScheduleReport | None:
    """The report of a study that composes no schedule before any trial (None: it may compose one)."""
    def report(status: ScheduleStatus, why: str) -> DraftScheduleReport:
        return DraftScheduleReport(study="", status=status, why=why)

    if not any(k.name == "draft_k" and len(k.values) > 1 for k in space.knobs):
        return report(ScheduleStatus.NO_DRAFT_KNOB, "the space tunes no draft_k")
    if choices is not None and choices.takes_draft_schedule:
        return None
    if choices is None or choices.status is ChoicesStatus.NOTHING_TO_CHECK:
        return report(ScheduleStatus.NOT_ACCEPTED, f"engine {space.engine} takes no draft length per batch size")
    if choices.status is not ChoicesStatus.CHECKED:
        return report(ScheduleStatus.NOT_ACCEPTED, (choices.notes() or [choices.status.value])[0])
    return report(ScheduleStatus.NOT_ACCEPTED,
                  f"vLLM {choices.engine_version} does not list {SCHEDULE_KEY} among its --speculative-config keys")


def _rest(trial: TrialResult) -> dict[str, object]:
    return {k: v for k, v in trial.candidate.values().items() if k not in KNOBS}


def compose(study: str, ranked: list[TrialResult], levels: list[int]) -> tuple[DraftScheduleReport, TrialResult | None]:
    """The schedule of the best trial's draft lengths per level, and that trial (the best single K)."""
    def report(status: ScheduleStatus, why: str, **more: object) -> DraftScheduleReport:
        return DraftScheduleReport.model_validate({"study": study, "status": status, "why": why, **more})

    anchor = ranked[0] if ranked else None
    if anchor is None:
        return report(ScheduleStatus.TOO_FEW, "no trial passed its gates"), None
    by_k: dict[int, TrialResult] = {}
    for trial in ranked:  # best first: each K's best-ranked trial of the best config
        k = trial.candidate.params.get("draft_k")
        by_hand = trial.candidate.params.get("draft_schedule") is not None
        if not by_hand and _rest(trial) == _rest(anchor) and isinstance(k, int) and k not in by_k:
            by_k[k] = trial
    single_k = anchor.candidate.params.get("draft_k")
    levels = sorted(set(levels))
    base = {"single_k_trial": anchor.number, "single_k": single_k if isinstance(single_k, int) else None}
    if len(by_k) < 2 or len(levels) < 2:
        return report(ScheduleStatus.TOO_FEW, f"{len(by_k)} draft length(s) measured for trial {anchor.number}'s "
                      f"config at {len(levels)} concurrency level(s); a schedule needs two of each", **base), anchor
    rows = []
    for level in levels:
        tps = {k: v for k, t in sorted(by_k.items()) if (v := tps_at(t, level)) is not None}
        if not tps:
            return report(ScheduleStatus.TOO_FEW, f"no draft length measured at concurrency {level}", **base), anchor
        best = max(tps, key=lambda k: (tps[k], k == single_k))
        rows.append(ScheduleLevel(concurrency=level, metric=level_metric(level), tps_by_k=tps, draft_k=best,
                                  single_k_tps=tps_at(anchor, level)))
    steps: list[DraftStep] = []
    for row in rows:
        if not steps or steps[-1].draft_k != row.draft_k:
            steps.append(DraftStep(from_batch=1 if not steps else row.concurrency, draft_k=row.draft_k))
    if len(steps) == 1:
        return report(ScheduleStatus.ONE_K, f"K={steps[0].draft_k} is fastest at every concurrency level",
                      levels=rows, **base), anchor
    schedule = DraftSchedule(steps=steps)
    return report(ScheduleStatus.UNCONFIRMED, "composed from the trials; its launch has not run", schedule=schedule,
                  levels=rows, **base), anchor


def schedule_candidate(trial: TrialResult, schedule: DraftSchedule) -> Candidate:
    """`trial`'s candidate drafting by `schedule` (draft_k its largest K)."""
    params = {**trial.candidate.params, "draft_k": schedule.max_k, "draft_schedule": schedule.text()}
    return trial.candidate.model_copy(update={"params": params})


def confirm_schedule(
    launch: Callable[[LaunchRequest], TrialResult], ctx: TrialContext, report: DraftScheduleReport,
    anchor: TrialResult, noise: NoiseOf, events: Callable[[str], None] = lambda _: None,
) -> DraftScheduleReport:
    """One launch of the schedule (decode and every concurrency level, no accuracy), judged against
    the best single K's trial level by level."""
    assert report.schedule is not None
    candidate = schedule_candidate(anchor, report.schedule)
    levels = [x.concurrency for x in report.levels]
    events(f"draft schedule {report.schedule.text()}: one launch against trial {anchor.number}")
    run_ctx = objective_only(ctx, concurrency=levels).model_copy(update={"gates": GatePolicy.NO_ACCURACY})
    result = launch(LaunchRequest(run_ctx, candidate, anchor.number, Purpose.DRAFT_SCHEDULE,
                                  log_name=f"draft-schedule-trial-{anchor.number:03d}", events=events))
    config = None
    if result.launch is not None:
        argv = result.launch.server.argv
        config = argv[argv.index("--speculative-config") + 1] if "--speculative-config" in argv else None
    if result.status != "ok":
        why = result.failure.message if result.failure else result.reason or result.status
        return report.model_copy(update={"why": f"its launch failed: {why}", "speculative_config": config})
    rows = [x.model_copy(update={"schedule_tps": tps_at(result, x.concurrency)}) for x in report.levels]
    rows, status, why = judge_levels(rows, noise())
    return report.model_copy(update={"levels": rows, "status": status, "why": why, "speculative_config": config})
