"""The study's answer as it stands (StudyOutcome): its trials with their gates judged again from
the stored evidence, ranked, the baseline, the confirmation, the draft schedule and the launch
noise. `outcome_of` reads it from runs.db (show, export, the report); a run judges it once, when
its trials end (autotune/study/run.py)."""

from __future__ import annotations

from collections import Counter

from pydantic import BaseModel, ConfigDict, Field

from autotune.failures.learning import environment_of
from autotune.gates.numerics import skip_reason
from autotune.gates.score import evaluate_gates, rank
from autotune.models import (
    AccuracyFailure, Confirmation, DraftScheduleReport, EnvironmentFailure, FailedClass, Objective, SearchSpace,
    TradeOff, TrialResult,
)
from autotune.store import RERUN_STATUSES, Store
from autotune.verdict.noise import LaunchNoise, NoiseKey
from autotune.verdict.tradeoffs import tradeoffs


class StudyOutcome(BaseModel):
    """A study's answer: its trials (gates judged), the ranking, the baseline and what was run
    beyond the trials."""

    model_config = ConfigDict(extra="forbid")

    name: str
    trials: list[TrialResult]
    ranked: list[TrialResult]
    baseline: TrialResult | None
    skipped_reasons: dict[str, int]
    exhausted: bool = False
    stopped: str | None = None  # why the study ended before its trial count (e.g. the time budget)
    confirmation: Confirmation | None = None
    draft_schedule: DraftScheduleReport | None = None  # vLLM: the draft length per batch size, or why none
    noise: LaunchNoise | None = None  # launch-to-launch spread on the study's host and engine, of its objective
    accuracy: bool = True  # the study's mode: accuracy gates on (False: throughput only, accuracy unchecked)
    objective: Objective = Field(default_factory=Objective)  # what the trials' objective and score measure
    accuracy_failures: list[AccuracyFailure] = Field(default_factory=list)  # numerics classes learned to fail
    # the study's latest launches failed for a cause every candidate shared: no answer (exit 3)
    environment: EnvironmentFailure | None = None
    space: SearchSpace | None = None  # the space the study was made from (None: a study row not found)

    @property
    def best(self) -> TrialResult | None:
        return self.ranked[0] if self.ranked else None

    def failed_classes(self) -> list[FailedClass]:
        """The numerics classes learned to fail accuracy, each with the launches skipped for it."""
        out = []
        for failure in self.accuracy_failures:
            saved = len({t.candidate.key() for t in self.trials  # each candidate once, however often proposed
                         if t.status == "skipped" and skip_reason(failure) in (t.reason or "")})
            out.append(FailedClass(failure=failure, launches_saved=saved))
        return out

    def tradeoffs_of(self, trial: TrialResult) -> list[TradeOff]:
        """Where `trial` is worse than the baseline beyond the launch noise (autotune/verdict/tradeoffs.py)."""
        return tradeoffs(trial, self.baseline, self.noise)


def rerun_if_cut(trial: TrialResult | None, trials: list[TrialResult]) -> TrialResult | None:
    """A trial that was cut (interrupted, crashed) or failed for a cause every candidate shared
    (environment) stands for its candidate's re-run, once it has one."""
    if trial is None or trial.status not in RERUN_STATUSES:
        return trial
    key = trial.candidate.key()
    return next((t for t in trials if t.candidate.key() == key and t.status not in (*RERUN_STATUSES, "skipped")),
                trial)


def baseline_of(trials: list[TrialResult]) -> TrialResult | None:
    """Trial 0, the engine's defaults (or its re-run when it was cut)."""
    return rerun_if_cut(next((t for t in trials if t.number == 0), None), trials)


def reference_of(store: Store, name: str, trials: list[TrialResult] | None = None) -> TrialResult | None:
    """qeval's reference: trial 0, or the trial named with `search --qeval-reference N`."""
    trials = trials if trials is not None else store.trials(name)
    number = store.study_reference(name)
    return rerun_if_cut(next((t for t in trials if t.number == number), None), trials)


def judged_again(
    store: Store, name: str, trials: list[TrialResult], space: SearchSpace | None = None
) -> list[TrialResult]:
    """`trials` with their gates judged again from the stored evidence with the study's own space
    (`space`: as the caller read it from the study's row) and mode, so a rule change (or a reference
    measured later) never leaves a stale pass."""
    if space is None:
        row = store.study(name)
        if row is None:
            return trials
        space = SearchSpace.model_validate_json(row["space"])
    gates = space.gates
    accuracy = store.study_accuracy(name)
    reference, base = reference_of(store, name, trials), baseline_of(trials)
    learned = store.accuracy_failures(name)
    return [t.model_copy(update={"gates": evaluate_gates(t, reference, gates, accuracy, base, learned)})
            for t in trials]


def outcome_of(store: Store, name: str, exhausted: bool = False, stopped: str | None = None,
               trials: list[TrialResult] | None = None) -> StudyOutcome:
    """The study as it stands (`trials`: its trials as the caller holds them, else read from runs.db),
    gates judged again (`judged_again`)."""
    trials = trials if trials is not None else store.trials(name)
    row = store.study(name)
    accuracy = store.study_accuracy(name)
    noise = None
    objective = Objective()
    space = None
    if row is not None:
        space = SearchSpace.model_validate_json(row["space"])
        trials = judged_again(store, name, trials, space)
        objective = space.objective
        noise = store.launch_noise(NoiseKey(host=row["host_key"], engine=row["engine"], metric=objective.sample_metric))
    base = baseline_of(trials)
    skipped = Counter(t.reason or "" for t in trials if t.status == "skipped")
    return StudyOutcome(
        name=name,
        trials=trials,
        ranked=rank(trials),
        baseline=base,
        skipped_reasons=dict(skipped),
        exhausted=exhausted,
        stopped=stopped,
        confirmation=store.confirmation(name),
        draft_schedule=store.draft_schedule(name),
        noise=noise,
        accuracy=accuracy,
        objective=objective,
        accuracy_failures=store.accuracy_failures(name),
        environment=environment_of(trials),
        space=space,
    )
