"""Numerics classes: accuracy failures that teach the search while it runs.

What decides a candidate's greedy output, and so its needle and qeval, is its numerics: KV cache
types, weight quantization, an attention path that changes precision. A space's knobs are in the
numerics class unless marked `numerics_neutral` (or `numerics_class: false`, for knobs that only
reorder arithmetic, such as threads and batch sizes). Every candidate holding the same values of
those knobs is in one class.

- **Gated at once, the first time.** With gates at the end (autotune.study.deferred) a faster trial
  defers its gates; but a trial whose class has not been gated yet, and has other candidates left
  to try, runs them at once when it would become the incumbent, so an accuracy loss shows while the
  sampler still proposes that class. Later trials of a class that passed defer as before, and so
  does a class of one candidate (a space that marks no knob out of the class): gating it early
  would save no launch.
- **A failed class is learned.** A trial's own needle or qeval failing stores its class
  (`accuracy_failures` in runs.db): candidates of the class are then never the best (a failed
  `numerics class` gate where they have no evidence of their own), are not launched (the pruner
  skips them, told to Optuna as pruned like every infeasible candidate), and their deferred gates
  are never run. Where one knob value alone separates the class from one that passed, the failure
  names it: that value and that trial, found from launches already made (no extra launch).
- **Isolated where it saves launches.** Otherwise, with a passed class several values apart and
  untried candidates that hold one of the failed values outside the failed class, the study puts
  that value alone on the passed class and gates it in a launch of its own (at most
  MAX_ISOLATION_LAUNCHES, the values that would keep most candidates from launching first, a class
  a trial already judged read without a launch), as crash failures are isolated
  (autotune.failures.isolation). A value that fails alone becomes what the failure matches, widened by every
  passed trial that holds it, so it never prunes a class seen to pass; its launches and seconds
  are kept with the failure.
"""

from __future__ import annotations

from enum import Enum

from autotune.models import (
    AccuracyFailure, Candidate, ClassAttempt, GateOutcome, Gates, Scalar, SearchSpace, TrialResult,
)

GATE = "numerics class"
ACCURACY_GATES = ("needle", "qeval")
#: launches one isolation of a failed class may spend (each runs needle and qeval)
MAX_ISOLATION_LAUNCHES = 2


class ClassStatus(str, Enum):
    UNGATED = "ungated"  # no trial of the class has measured every accuracy gate yet
    PASSED = "passed"
    FAILED = "failed"


def class_knobs(space: SearchSpace) -> list[str]:
    return [k.name for k in space.knobs if k.in_numerics_class]


def knob_values(space: SearchSpace, candidate: Candidate) -> dict[str, Scalar]:
    return {k.name: candidate.params.get(k.name, candidate.env.get(k.name)) for k in space.knobs}


def numerics_class(space: SearchSpace, candidate: Candidate) -> dict[str, Scalar]:
    """The candidate's values of the knobs in the numerics class."""
    values = knob_values(space, candidate)
    return {name: values[name] for name in class_knobs(space)}


def own_accuracy(trial: TrialResult, outcomes: list[GateOutcome] | None = None) -> list[GateOutcome]:
    """The trial's accuracy gates (`outcomes`, else its stored ones) judged on evidence it measured
    itself: not reused, not skipped."""
    if trial.status != "ok" or trial.accuracy_from is not None:
        return []
    gates = trial.gates if outcomes is None else outcomes
    return [g for g in gates if g.gate in ACCURACY_GATES and g.status in ("pass", "fail")]


def failure_of(space: SearchSpace, trial: TrialResult, trials: list[TrialResult]) -> AccuracyFailure | None:
    """The class failure a trial's own failed needle or qeval teaches, or None."""
    failed = [g for g in own_accuracy(trial) if g.status == "fail"]
    values = numerics_class(space, trial.candidate)
    if not failed or not values:
        return None
    return AccuracyFailure(
        study=trial.study, trial=trial.number, knob_values=values, gates=[g.gate for g in failed],
        evidence=[f"{g.gate}: {g.detail}" for g in failed], differs_from=_one_value_apart(space, values, trials),
    )


def _one_value_apart(space: SearchSpace, values: dict[str, Scalar], trials: list[TrialResult]) -> str | None:
    """The knob value that alone separates a failed class from one that passed, where one did."""
    for other in trials:
        if class_status_of_trial(space, other) is not ClassStatus.PASSED:
            continue
        theirs = numerics_class(space, other.candidate)
        apart = [k for k in values if values[k] != theirs.get(k)]
        if len(apart) == 1:
            return f"{apart[0]}={values[apart[0]]} (else the class of trial {other.number}, which passed)"
    return None


def _wanted(gates: Gates) -> set[str]:
    return {g for g in ACCURACY_GATES if getattr(gates, g) is not None}


def status_of(judged: list[GateOutcome], gates: Gates) -> ClassStatus:
    """What a trial's own accuracy evidence (own_accuracy) says of its class."""
    if any(g.status == "fail" for g in judged):
        return ClassStatus.FAILED
    wanted = _wanted(gates)
    if wanted and {g.gate for g in judged if g.status == "pass"} >= wanted:
        return ClassStatus.PASSED
    return ClassStatus.UNGATED


def class_status_of_trial(space: SearchSpace, trial: TrialResult) -> ClassStatus:
    """What the trial's own evidence says of its class (reused or skipped gates say nothing)."""
    return status_of(own_accuracy(trial), space.gates)


def class_status(space: SearchSpace, candidate: Candidate, trials: list[TrialResult],
                 failures: list[AccuracyFailure]) -> ClassStatus:
    """Where the candidate's class stands: failed (learned), passed (a trial of it passed every
    accuracy gate on its own evidence), or not gated yet."""
    if failed_class(candidate, failures) is not None:
        return ClassStatus.FAILED
    mine = numerics_class(space, candidate)
    same = [t for t in trials if numerics_class(space, t.candidate) == mine]
    if any(class_status_of_trial(space, t) is ClassStatus.PASSED for t in same):
        return ClassStatus.PASSED
    return ClassStatus.UNGATED


def failed_class(candidate: Candidate, failures: list[AccuracyFailure]) -> AccuracyFailure | None:
    values = {**candidate.env, **candidate.params}
    return next((f for f in failures if f.matches(values)), None)


def skip_reason(failure: AccuracyFailure) -> str:
    """Why a candidate of a failed class is not launched (a skipped trial's reason)."""
    return f"numerics class {failure.label()} failed {' and '.join(failure.gates)} in trial {failure.trial}"


def class_gate(trial: TrialResult, outcomes: list[GateOutcome], gates: Gates,
               failures: list[AccuracyFailure]) -> GateOutcome | None:
    """A failed gate for a trial of a failed class whose own evidence (`outcomes`, its accuracy
    gates as just judged) neither failed already nor passed every accuracy gate."""
    failure = failed_class(trial.candidate, failures)
    if failure is None or trial.status != "ok":
        return None
    if status_of(own_accuracy(trial, outcomes), gates) is not ClassStatus.UNGATED:
        return None  # its own evidence stands, failed or passed
    return GateOutcome(gate=GATE, status="fail", detail=f"learned: {skip_reason(failure)} ({'; '.join(failure.evidence)})")


def _apart(values: dict[str, Scalar], theirs: dict[str, Scalar]) -> dict[str, Scalar]:
    return {k: v for k, v in values.items() if v != theirs.get(k)}


def failed_on(judged: list[GateOutcome], gates: list[str]) -> bool | None:
    """Whether a launch's own accuracy evidence (own_accuracy) fails any of `gates` (True), passes
    them all (False), or does not say (None: one is not measured)."""
    mine = {g.gate: g.status for g in judged if g.gate in gates}
    if "fail" in mine.values():
        return True
    return False if set(mine) >= set(gates) else None


def nearest_passed(space: SearchSpace, values: dict[str, Scalar], gates: list[str],
                   trials: list[TrialResult]) -> tuple[TrialResult, dict[str, Scalar]] | None:
    """The trial that passed `gates` (the ones the class failed) on its own evidence, fewest values
    apart from the failed class `values` (earliest on ties), and the failed class's values where
    the two differ."""
    passed = [t for t in trials if failed_on(own_accuracy(t), gates) is False]
    if not passed:
        return None
    nearest = min(passed, key=lambda t: (len(_apart(values, numerics_class(space, t.candidate))), t.number))
    return nearest, _apart(values, numerics_class(space, nearest.candidate))


def worth_isolating(space: SearchSpace, differing: dict[str, Scalar], untried: list[Candidate]) -> list[dict[str, Scalar]]:
    """The failed class's single values worth a launch on the passed class: each that untried
    candidates (outside the failed class) hold, the most held first. None where one value differs
    or where no untried candidate would be kept from launching."""
    if len(differing) < 2:
        return []
    held = {k: sum(1 for c in untried if knob_values(space, c).get(k) == v) for k, v in differing.items()}
    return [{k: differing[k]} for k in sorted(held, key=lambda k: -held[k]) if held[k] > 0]


def judged_by_trial(space: SearchSpace, values: dict[str, Scalar], gates: list[str],
                    trials: list[TrialResult]) -> ClassAttempt | None:
    """An attempt a trial of the study already answers: it holds the class `values` and its own
    evidence says whether `gates` fail."""
    for trial in trials:
        failed = failed_on(own_accuracy(trial), gates)
        if failed is not None and numerics_class(space, trial.candidate) == values:
            return ClassAttempt(values=values, failed=failed, trial=trial.number,
                                evidence=[f"{g.gate}: {g.detail}" for g in own_accuracy(trial)])
    return None


def widen(space: SearchSpace, found: dict[str, Scalar], full_class: dict[str, Scalar], gates: list[str],
          trials: list[TrialResult]) -> tuple[dict[str, Scalar], list[int]]:
    """Add the failed class's values until no trial that passed `gates` holds them all."""
    values, refuting = dict(found), []
    for trial in trials:
        theirs = numerics_class(space, trial.candidate)
        if failed_on(own_accuracy(trial), gates) is False and all(theirs.get(k) == v for k, v in values.items()):
            values.update(_apart(full_class, theirs))
            refuting.append(trial.number)
    return dict(sorted(values.items())), refuting
