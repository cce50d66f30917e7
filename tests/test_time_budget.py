"""The search's wall-clock budget: what fits, what is refused, and the typical trial time."""

from __future__ import annotations

from autotune.models import Candidate, TrialResult
from autotune.study.budget import TimeBudget, typical_trial_s


def test_refuses_only_a_launch_that_would_not_fit():
    now = [0.0]
    budget = TimeBudget(300.0, clock=lambda: now[0])
    now[0] = 100.0
    assert budget.refusal(150.0) is None
    assert budget.refusal(None) is None  # nothing measured yet: the first launch always runs
    assert budget.refusal(250.0, "a confirmation round") == (
        "time budget: 200 s left, a confirmation round takes ~250 s here"
    )
    now[0] = 400.0
    assert budget.refusal(1.0) == "time budget: 0 s left, a trial takes ~1 s here"


def test_no_budget_never_refuses():
    assert TimeBudget(None).refusal(1e9) is None
    assert TimeBudget(None).how_many_fit(3, 1e9) == 3


def test_rounds_are_cut_to_what_fits():
    now = [0.0]
    budget = TimeBudget(1000.0, clock=lambda: now[0])
    now[0] = 400.0  # 600 s left
    assert budget.how_many_fit(2, 250.0) == 2
    assert budget.how_many_fit(3, 250.0) == 2
    assert budget.how_many_fit(2, 700.0) == 0
    assert budget.how_many_fit(2, None) == 2  # nothing measured: no basis to cut


def test_typical_trial_time_is_the_median_of_launched_trials_whose_engine_served():
    def trial(n: int, status: str, duration: float, **phases: float) -> TrialResult:
        candidate = Candidate(engine="llamacpp", params={"n": n})
        return TrialResult(study="s", number=n, candidate=candidate, status=status, duration_s=duration,
                           phase_s=phases)

    assert typical_trial_s([]) is None
    trials = [trial(0, "ok", 100.0), trial(1, "failed", 20.0, start=5.0, decode=15.0), trial(2, "ok", 300.0),
              trial(3, "skipped", 0.0)]
    assert typical_trial_s(trials) == 100.0
    # issue 47: starts that died in 2 s priced the next launches at 2 s
    dead = [trial(4, "failed", 2.0, start=2.0), trial(5, "environment", 2.0, start=2.0)]
    assert typical_trial_s([*trials, *dead]) == 100.0 and typical_trial_s(dead) is None


def _timed(n: int, started: str, **phases: float) -> TrialResult:
    return TrialResult(study="s", number=n, candidate=Candidate(engine="vllm", params={"n": n}), status="ok",
                       duration_s=sum(phases.values()), phase_s=phases, started_at=started)


def test_a_relaunch_is_priced_by_what_it_repeats_of_warm_trials_not_by_whole_trials():
    from autotune.models import Objective
    from autotune.study.relaunch_cost import gates_relaunch_s, relaunch_s

    cold = _timed(0, "2026-12-03T00:00:00", start=300.0, decode=20.0, prefill=400.0, concurrency=100.0, teardown=5.0)
    warm = _timed(1, "2026-12-03T00:10:00", start=100.0, decode=20.0, prefill=400.0, concurrency=100.0, teardown=5.0)
    gated = _timed(2, "2026-12-03T00:20:00", start=110.0, decode=20.0, prefill=400.0, teardown=5.0, needle=60.0, qeval=90.0)
    one_stream, wave = Objective(), Objective(metric="output_tps_c8")
    assert relaunch_s([cold], one_stream) == 325.0  # only the cold one: its start is all there is
    assert relaunch_s([cold, warm], one_stream) == 125.0  # start + decode + teardown of the warm trial
    assert relaunch_s([cold, warm], wave) == 225.0  # the objective's wave is measured again
    assert relaunch_s([cold, warm], one_stream, measured=[70.0, 80.0, 0.0]) == 75.0  # timed relaunches first
    assert relaunch_s([], one_stream) is None
    assert gates_relaunch_s([cold, warm, gated], one_stream) == 130.0 + 150.0  # median warm relaunch + the gates


def test_the_forecast_prices_confirmation_launches_at_the_relaunch_price():
    from autotune.study.forecast import RunForecast

    plan = RunForecast(study="s", candidates_total=4, candidates_left=2, measured=0, trials=2, confirm_rounds=2,
                       trial_s=600.0, basis="b", relaunch_s=100.0)
    assert plan.total_s == 2 * 600.0 + 4 * 100.0
    assert plan.model_copy(update={"relaunch_s": None}).total_s == 6 * 600.0  # nothing known: a trial bounds it
