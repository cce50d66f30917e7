"""The search's wall-clock budget: what fits, what is refused, and the typical trial time."""

from __future__ import annotations

from autotune.models import Candidate, TrialResult
from autotune.study import TimeBudget, typical_trial_s


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


def test_typical_trial_time_is_the_median_of_launched_trials():
    def trial(n: int, status: str, duration: float) -> TrialResult:
        candidate = Candidate(engine="llamacpp", params={"n": n})
        return TrialResult(study="s", number=n, candidate=candidate, status=status, duration_s=duration)

    assert typical_trial_s([]) is None
    trials = [trial(0, "ok", 100.0), trial(1, "failed", 20.0), trial(2, "ok", 300.0), trial(3, "skipped", 0.0)]
    assert typical_trial_s(trials) == 100.0
