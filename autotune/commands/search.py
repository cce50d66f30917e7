"""`autotune search`: own the study (autotune/study/lock.py) for as long as its run launches anything,
and run it (autotune/study/run.py); what a run will do, before it starts (autotune/study/forecast.py);
the error a study that gave no answer exits with."""

from __future__ import annotations

import time
from collections.abc import Callable

from autotune.errors import AutotuneError, ConfigError, EnvironmentFailed
from autotune.study.forecast import RunForecast
from autotune.study.forecast import forecast as run_forecast
from autotune.study.lock import StudyLock, StudyOwner
from autotune.study.outcome import StudyOutcome
from autotune.study.prepared import RunSettings, PreparedStudy
from autotune.study.reporter import Reporter
from autotune.study.run import StudyRun
from autotune.trial.launch import Launch
from autotune.trial.run import EngineLaunch


def run(
    plan: PreparedStudy,
    *,
    trials: int,
    seed: int = 0,
    confirm_rounds: int = 0,
    noise_relaunches: int = 1,
    qeval_reference: int | None = None,
    time_budget_s: float | None = None,
    reporter: Reporter | None = None,
    wait_s: float | None = None,
    on_wait: Callable[[StudyOwner], None] | None = None,
    on_owned: Callable[[], None] | None = None,
    launch: Launch | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> StudyOutcome:
    """Run the study, owning it for the whole run: another process on the same study is refused
    (StudyBusy) or, with `wait_s`, waits that long for it. Every engine start goes through `launch`
    (the engine's by default); the time budget reads `clock`."""
    assert plan.store is not None
    settings = RunSettings(trials=trials, seed=seed, confirm_rounds=confirm_rounds, noise_relaunches=noise_relaunches,
                           qeval_reference=qeval_reference, time_budget_s=time_budget_s)
    with StudyLock(plan.store, plan.study, wait_s=wait_s, on_wait=on_wait):
        if on_owned is not None:  # e.g. the forecast: printed once this process owns the study
            on_owned()
        return StudyRun(plan, settings, launch=launch or EngineLaunch(), reporter=reporter, clock=clock).run()


def forecast(plan: PreparedStudy, trials: int, confirm_rounds: int, noise_relaunches: int = 0) -> RunForecast:
    """What a run of `plan` will do before its first launch (autotune/study/forecast.py)."""
    return run_forecast(plan, RunSettings(trials=trials, confirm_rounds=confirm_rounds,
                                          noise_relaunches=noise_relaunches))


def no_answer(outcome: StudyOutcome) -> AutotuneError | None:
    """Why the study gave no answer at all, as the error to exit with; None when it ran (a study
    whose trials were measured but found no winner has an answer: that verdict). Exit 3 when every
    candidate failed for a cause no knob explains, or no launch got its engine to serve; exit 2 when
    no trial ran because of the study's own settings (its time budget, a configuration it refuses)."""
    if outcome.environment is not None:
        return EnvironmentFailed(f"no answer: {outcome.environment.describe()}")
    launched = [t for t in outcome.trials if t.status != "skipped"]
    if not launched:
        return ConfigError(f"no trial ran: {outcome.stopped}") if outcome.stopped else None
    if any(t.served for t in launched):
        return None
    failed = [t for t in launched if t.failure is not None]
    first = failed[0] if failed else launched[0]
    why = first.failure.message if first.failure else (first.reason or first.status)
    if failed and all(t.failure.failure_class == "configuration_error" for t in failed):
        return ConfigError(f"no answer: no trial could run with the study's settings (trial {first.number}: {why})")
    return EnvironmentFailed(
        f"no answer: no launch got its engine to serve ({len(launched)} launched; trial {first.number}: {why}); "
        "`autotune show` lists each failure, `autotune probe --classify LOG` reads a log")
