"""A candidate that cannot beat the incumbent within launch noise skips its gates (issue 12, item 4)."""

from __future__ import annotations

from autotune.dominated import dominated_check
from autotune.models import Candidate, Gates, TrialResult
from autotune.noise import LaunchNoise
from autotune.score import evaluate_gates, rank, verdict

NOISE = LaunchNoise(sigma=0.05, df=10, groups=5, launches=15)  # two standard errors of a ratio: ~14 %


def _trial(number: int, objective: float, **extra) -> TrialResult:
    return TrialResult(study="s", number=number, candidate=Candidate(engine="llamacpp", params={"n": number}),
                       status="ok", objective=objective, score=objective, **extra)


def test_below_the_incumbent_beyond_two_standard_errors_is_dominated():
    check = dominated_check(_trial(3, 40.0), NOISE)
    assert check is not None
    assert check(30.0) and "incumbent trial 3" in check(30.0)  # x0.75
    assert check(36.0) is None  # x0.90: inside the noise, the gates run
    assert check(45.0) is None  # faster: it may become the best


def test_unknown_noise_or_no_incumbent_dominates_nothing():
    assert dominated_check(None, NOISE) is None
    assert dominated_check(_trial(1, 40.0), None) is None


def test_a_dominated_trial_keeps_its_numbers_but_is_never_ranked_and_says_why():
    gates = Gates()
    reference = _trial(0, 20.0)
    fast = _trial(1, 40.0)
    slow = _trial(2, 25.0, dominated="25.0 vs incumbent trial 1 40.0: x0.62, below it beyond the launch noise")
    judged = slow.model_copy(update={"gates": evaluate_gates(slow, reference, gates)})
    assert [g.status for g in judged.gates] == ["unchecked", "unchecked"]
    assert all("dominated" in (g.detail or "") for g in judged.gates)
    assert verdict(judged).startswith("dominated: 25.0 vs incumbent trial 1")
    assert judged.objective == 25.0 and not judged.feasible
    assert rank([judged]) == []
