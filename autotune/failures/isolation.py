"""Isolate the knob that broke, for a failure no signature explains.

Compare the failed candidate with the nearest candidate that ran (fewest differing knobs). One
differing knob is the answer without a launch. With more, launch reduced candidates — the one
that ran plus one of the failed candidate's values, then plus a pair — until one reproduces the
failure alone (delta debugging over the differing knobs, smallest subsets first). Each is a smoke
launch with cheap settings (start, one short completion, stop: trial/launch.py's SMOKE purpose);
a cheap setting never overrides a knob under test.

An isolated subset is minimal relative to the candidate that ran, not in general: when a trial
that ran holds the isolated values too, the values where it differs from the failed candidate are
added, so what is learned never prunes a configuration that was seen to work.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator

from pydantic import BaseModel, ConfigDict, Field

from autotune.engines import get_engine
from autotune.models import Candidate, FailureInfo, Scalar, TrialResult

#: failure classes the fallbacks produce: any of them reproduces any other
FALLBACK_CLASSES = frozenset({"unclassified_crash", "startup_crash", "crash_during_run", "serving_failed"})
MAX_LAUNCHES = 6

#: starts a candidate once (a smoke launch, under the given log name); the failure it shows, or None
SmokeLaunch = Callable[[Candidate, str], "FailureInfo | None"]


class IsolationAttempt(BaseModel):
    model_config = ConfigDict(extra="forbid")

    values: dict[str, Scalar] = Field(description="the failed candidate's values put on the one that ran")
    failed: bool
    failure_class: str | None = None
    duration_s: float = 0.0


class Isolation(BaseModel):
    """What isolating one failed trial found, and what it cost."""

    model_config = ConfigDict(extra="forbid")

    study: str
    trial: int
    failure_class: str
    nearest_trial: int | None = None
    differing: dict[str, Scalar] = Field(default_factory=dict, description="knob -> failed candidate's value")
    isolated: dict[str, Scalar] | None = Field(None, description="knob values that reproduce the failure alone")
    widened_by: list[int] = Field(default_factory=list, description="trials that ran with the isolated values")
    launches: int = 0
    attempts: list[IsolationAttempt] = Field(default_factory=list)
    verdict: str

    def summary(self) -> str:
        cost = f"{self.launches} launch{'es' if self.launches != 1 else ''}"
        if self.isolated:
            values = ", ".join(f"{k}={v}" for k, v in self.isolated.items())
            return (f"trial {self.trial} ({self.failure_class}): isolated {values} "
                    f"vs trial {self.nearest_trial}, {len(self.differing)} knob(s) differed; {cost}")
        return f"trial {self.trial} ({self.failure_class}): not isolated, {self.verdict}; {cost}"


def knob_diff(failed: Candidate, ran: Candidate, knobs: list[str]) -> dict[str, Scalar]:
    """The knobs where the failed candidate differs from the one that ran, with the failed values."""
    return {k: failed.params.get(k) for k in knobs if failed.params.get(k) != ran.params.get(k)}


def nearest_ran(failed: Candidate, trials: list[TrialResult], knobs: list[str]) -> TrialResult | None:
    """The trial that ran (started and served) with the fewest knobs differing; earliest on ties."""
    ran = [t for t in trials if t.status == "ok"]
    if not ran:
        return None
    return min(ran, key=lambda t: (len(knob_diff(failed, t.candidate, knobs)), t.number))


def reductions(differing: dict[str, Scalar]) -> Iterator[dict[str, Scalar]]:
    """Subsets of the differing values to try alone: every single one, then every pair."""
    names = list(differing)
    for size in (1, 2):
        if size >= len(names):
            return  # the whole set is the failed candidate itself: it already failed
        for subset in itertools.combinations(names, size):
            yield {k: differing[k] for k in subset}


def reduced(ran: Candidate, values: dict[str, Scalar], cheap: dict[str, Scalar], under_test: set[str]) -> Candidate:
    params = dict(ran.params)
    params.update({k: v for k, v in cheap.items() if k not in under_test})
    params.update(values)
    return Candidate(engine=ran.engine, params=dict(sorted(params.items())), env=dict(ran.env))


def reproduces(original: str, found: FailureInfo | None) -> bool:
    if found is None:
        return False
    if original in FALLBACK_CLASSES:
        return found.failure_class in FALLBACK_CLASSES
    return found.failure_class == original


def widen(
    isolated: dict[str, Scalar], failed: Candidate, trials: list[TrialResult], knobs: list[str]
) -> tuple[dict[str, Scalar], list[int]]:
    """Add values until no trial that ran holds them all (a run that worked refutes a subset)."""
    values = dict(isolated)
    refuting: list[int] = []
    for trial in (t for t in trials if t.status == "ok"):
        if all(trial.candidate.params.get(k) == v for k, v in values.items()):
            extra = knob_diff(failed, trial.candidate, knobs)
            if not extra:
                continue  # the same configuration both ran and failed: nothing to add
            values.update(extra)
            refuting.append(trial.number)
    return values, refuting


def isolate(
    failed: TrialResult,
    trials: list[TrialResult],
    knobs: list[str],
    launch: SmokeLaunch,
    *,
    max_launches: int = MAX_LAUNCHES,
) -> Isolation:
    """Find the knob values of `failed` that reproduce its failure alone (see the module doc).

    `launch(candidate, name)` starts the candidate once and returns the failure it shows (None when
    it served); `trials` are the study's trials so far.
    """
    assert failed.failure is not None
    cls = failed.failure.failure_class
    record = {"study": failed.study, "trial": failed.number, "failure_class": cls}
    nearest = nearest_ran(failed.candidate, [t for t in trials if t.number != failed.number], knobs)
    if nearest is None:
        return Isolation(**record, verdict="no candidate has run yet to compare with")
    differing = knob_diff(failed.candidate, nearest.candidate, knobs)
    record.update(nearest_trial=nearest.number, differing=differing)
    if not differing:
        return Isolation(**record, verdict=f"the same configuration ran in trial {nearest.number}: not a knob failure")
    if len(differing) == 1:
        found, attempts = dict(differing), []
    else:
        found, attempts = None, []
        cheap = dict(get_engine(failed.candidate.engine).cheap_params)  # a fast smoke launch
        for values in reductions(differing):
            if len(attempts) >= max_launches:
                break
            candidate = reduced(nearest.candidate, values, cheap, set(differing))
            t0 = time.monotonic()
            shown = launch(candidate, f"isolate-{failed.number:03d}-{len(attempts) + 1}")
            hit = reproduces(cls, shown)
            attempts.append(IsolationAttempt(values=values, failed=hit, failure_class=shown.failure_class if shown else None,
                                             duration_s=round(time.monotonic() - t0, 1)))
            if hit:
                found = values
                break
    record.update(attempts=attempts, launches=len(attempts))
    if found is None:
        why = "launch budget used up" if len(attempts) >= max_launches else "no single value or pair reproduced it"
        return Isolation(**record, verdict=why)
    values, refuting = widen(found, failed.candidate, trials, knobs)
    verdict = "reproduced alone" if attempts else "the only knob that differs"
    if refuting:
        verdict += f"; widened by trial(s) {', '.join(map(str, refuting))} that ran with the isolated values"
    return Isolation(**record, isolated=values, widened_by=refuting, verdict=verdict)
