"""A candidate that cannot rank above the incumbent skips its gates (issue 12, item 4)."""

from __future__ import annotations

from autotune.gates.dominated import dominated_check
from autotune.models import Candidate, Gates, TrialResult
from autotune.verdict.noise import LaunchNoise
from autotune.gates.score import evaluate_gates, rank, verdict

NOISE = LaunchNoise(sigma=0.05, df=10, groups=5, launches=15)  # two standard errors of a ratio: ~14 %


def _trial(number: int, objective: float, **extra) -> TrialResult:
    return TrialResult(study="s", number=number, candidate=Candidate(engine="llamacpp", params={"n": number}),
                       status="ok", objective=objective, score=objective, **extra)


def test_below_the_incumbent_beyond_two_standard_errors_is_dominated():
    check = dominated_check(_trial(3, 40.0), NOISE)
    assert check is not None
    skip = check(30.0, 30.0)  # x0.75
    assert skip is not None and skip.kind.value == "dominated" and "incumbent trial 3" in skip.why
    assert skip.fields() == {"dominated": skip.why}
    assert check(45.0, 45.0) is None  # faster: it may become the best


def test_no_incumbent_dominates_nothing():
    assert dominated_check(None, NOISE) is None
    assert dominated_check(None, None) is None
    assert dominated_check(_trial(1, 40.0).model_copy(update={"score": None}), NOISE) is None


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


def test_on_a_fresh_host_a_candidate_below_the_incumbent_still_skips_its_gates():
    """The study ranks eligible trials by score, so one whose score is not above the incumbent's can
    never rank first, noise known or not: its gates would not change the pick."""
    check = dominated_check(_trial(3, 40.0), None)
    assert check is not None
    why = check(38.0, 38.0).why
    assert "incumbent trial 3" in why and "cannot rank first" in why
    assert check(40.0, 40.0)  # a tie in score goes to the earlier trial
    assert check(45.0, 45.0) is None  # faster: it may become the best, the gates run
    assert check(45.0, 39.0) and not check(39.0, 41.0)  # the score decides, as it does in rank()


def test_inside_the_noise_is_said_apart_from_beyond_it():
    check = dominated_check(_trial(3, 40.0), NOISE)
    assert check is not None
    assert "beyond the launch noise" in check(30.0, 30.0).why
    inside = check(38.0, 38.0).why
    assert "inside the launch noise" in inside and "cannot rank first" in inside


def test_the_sampler_is_not_told_that_skipped_gates_failed():
    from autotune.gates.score import constraint_values

    slow = _trial(2, 25.0, dominated="25.0 vs incumbent trial 1 40.0: x0.62; cannot rank first")
    judged = slow.model_copy(update={"gates": evaluate_gates(slow, _trial(0, 20.0), Gates())})
    assert judged.gates and all(g.status == "unchecked" for g in judged.gates)
    assert set(constraint_values(judged).values()) == {0.0}  # unknown, not failed: its speed still teaches
    missing = _trial(4, 25.0).model_copy(update={"gates": evaluate_gates(_trial(4, 25.0), _trial(0, 20.0), Gates())})
    assert set(constraint_values(missing).values()) == {1.0}  # measured nothing, not skipped: infeasible


def test_show_lists_a_dominated_trial_tied_with_the_best_and_says_its_gates_were_skipped():
    from rich.console import Console

    from autotune.output.terminal import print_best
    from autotune.study.outcome import StudyOutcome

    base = _trial(0, 20.0, gates=[])
    best = _trial(1, 40.0)
    close = _trial(2, 38.0, dominated="38.0 vs incumbent trial 1 40.0: x0.95, inside the launch noise")
    far = _trial(3, 22.0, dominated="22.0 vs incumbent trial 1 40.0: x0.55, below it beyond the launch noise")
    outcome = StudyOutcome(name="s", trials=[base, best, close, far], ranked=[best, base], baseline=base,
                           skipped_reasons={}, noise=NOISE)
    console = Console(record=True, width=200)
    print_best(console, outcome)
    text = console.export_text()
    assert "best: trial 1" in text
    assert "tied with the best within the launch noise: trial(s) 2 (gates skipped)" in text
    assert "3" not in text.split("tied with the best")[1].split("\n")[0]  # beyond the noise: not tied
