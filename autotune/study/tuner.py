"""The Optuna study: baseline first, sample, prune before launching, run trials, gate, rank.

Optuna's storage is the same runs.db (RDB storage); the project's own records go through
store/runs_db.py. A re-run of the same command finds both and resumes. Infeasible candidates are never
launched: they are told to Optuna as PRUNED and kept with their reason. A candidate already
measured in the study is never launched again: its stored score is told instead.

Every attempt is accounted for: a launch is recorded in runs.db (`attempts`) before it starts. One
cut by Ctrl-C / SIGTERM is saved as `interrupted`, one cut by an error of autotune itself as
`crashed`, and one whose process died without a word (kill -9) is found on resume and saved as
`crashed`; each is told to Optuna as FAIL with `autotune_status` set, and re-run once on resume.
A candidate cut twice counts as failed.
"""

from __future__ import annotations

import math
import os
import random
import socket
import statistics
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState
from pydantic import BaseModel, ConfigDict, Field

from autotune.study.deferred import (
    REFERENCE_NEEDLE, gate_the_head, gates_relaunch_context, lazy, optimistic_incumbent, reference_context,
)
from autotune.gates.dominated import DominatedCheck, dominated_check
from autotune.errors import NoValidCandidate
from autotune.failures.learning import (
    as_environment, environment_failed, environment_of, learn_from_failure, shared_failure,
)
from autotune.models import (
    AccuracyFailure, Candidate, ClassAttempt, Cluster, ClassIsolation, Confirmation, DraftScheduleReport,
    EnvironmentFailure, FailedClass, GatePolicy, Objective, Scalar, SearchSpace, TradeOff, TrialResult,
)
from autotune.verdict.noise import LaunchNoise
from autotune.gates.numerics import (
    MAX_ISOLATION_LAUNCHES, ClassStatus, class_status, class_status_of_trial, failed_class, failed_on, failure_of,
    judged_by_trial,
    knob_values, nearest_passed, numerics_class, own_accuracy, skip_reason, widen, worth_isolating,
)
from autotune.study.leases import BoxPool
from autotune.study.parallel import Flight, Launches, in_flight_text, leased_context, on_boxes
from autotune.study.plan import queued_first
from autotune.study.relaunch_cost import gates_relaunch_s
from autotune.study.relaunches import Relaunch
from autotune.gates.score import constraint_values, evaluate_gates, rank
from autotune.space.candidates import Pruner, baseline, enumerate_candidates, make_candidate
from autotune.store import ATTEMPTS_BEFORE_FAILURE, CUT_STATUSES, ENVIRONMENT, RERUN_STATUSES, Store, attempt_boxes
from autotune.study.view import StudyTrials
from autotune.verdict.tradeoffs import tradeoffs
from autotune.trial.context import TrialContext
from autotune.trial.launch import Launch, LaunchRequest, Purpose
from autotune.trial.run import EngineLaunch

MAX_IDLE_ASKS = 25
STATUS_ATTR = "autotune_status"  # Optuna user attribute naming an attempt's autotune status


class Reporter(Protocol):
    def trial_started(self, number: int, launched: int, total: int, candidate: Candidate) -> None: ...

    def trial_event(self, text: str) -> None: ...

    def trial_finished(self, result: TrialResult, best: TrialResult | None) -> None: ...

    def trial_skipped(self, result: TrialResult) -> None: ...

    def relaunch_started(self, relaunch: Relaunch) -> None: ...

    def learned(self, text: str) -> None: ...

    def in_flight(self, text: str) -> None: ...


class SilentReporter:
    def trial_started(self, number: int, launched: int, total: int, candidate: Candidate) -> None:
        pass

    def trial_event(self, text: str) -> None:
        pass

    def trial_finished(self, result: TrialResult, best: TrialResult | None) -> None:
        pass

    def trial_skipped(self, result: TrialResult) -> None:
        pass

    def relaunch_started(self, relaunch: Relaunch) -> None:
        pass

    def learned(self, text: str) -> None:
        pass

    def in_flight(self, text: str) -> None:
        pass


class StudyOutcome(BaseModel):
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


class TimeBudget:
    """A wall-clock budget for launches: the next one starts only if a typical one still fits."""

    def __init__(self, seconds: float | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self.clock = clock
        self.started = clock()

    def left_s(self) -> float:
        return float("inf") if self.seconds is None else self.seconds - (self.clock() - self.started)

    def how_many_fit(self, wanted: int, each_s: float | None) -> int:
        """How many of `wanted` launches of ~`each_s` seconds fit in what is left."""
        if self.seconds is None or not each_s:
            return wanted
        return max(0, min(wanted, int(self.left_s() // each_s)))

    def refusal(self, expected_s: float | None, what: str = "a trial") -> str | None:
        """Why the next launch does not fit, or None when it does (or nothing is known yet)."""
        if self.seconds is None or expected_s is None or expected_s <= self.left_s():
            return None
        return f"time budget: {max(0.0, self.left_s()):.0f} s left, {what} takes ~{expected_s:.0f} s here"


def typical_trial_s(trials: list[TrialResult]) -> float | None:
    """Median wall time of the trials so far whose engine served (None before the first): a start
    that failed in seconds is not what the next launch will take."""
    durations = [t.duration_s for t in trials if t.status != "skipped" and t.served and t.duration_s]
    return statistics.median(durations) if durations else None


def distributions(ctx: TrialContext) -> dict[str, CategoricalDistribution]:
    return {k.name: CategoricalDistribution(k.values) for k in ctx.space.knobs}


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
    if row is not None:
        space = SearchSpace.model_validate_json(row["space"])
        trials = judged_again(store, name, trials, space)
        objective = space.objective
        noise = store.launch_noise(row["host_key"], row["engine"], objective.sample_metric)
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
    )


def _fail_running(study: optuna.Study, frozen: optuna.trial.FrozenTrial, status: str) -> None:
    """Tell Optuna a RUNNING trial failed, naming why in its user attributes. Works for a trial
    asked by a process that is gone (a live Trial handle is rebuilt from the stored id)."""
    optuna.Trial(study, frozen._trial_id).set_user_attr(STATUS_ATTR, status)
    study.tell(frozen.number, state=TrialState.FAIL)


def tell(study: optuna.Study, trial: optuna.Trial, result: TrialResult) -> None:
    """What the sampler learns from a trial: its score with one constraint per gate, or a failure."""
    if result.status != "ok" or result.score is None:
        study.tell(trial, state=TrialState.FAIL)
        return
    for gate, value in constraint_values(result).items():
        trial.set_constraint(gate, value)
    study.tell(trial, result.score)


def restore_trials(store: Store, ctx: TrialContext, results: list[TrialResult]) -> None:
    """Write a study's recorded trials into a runs.db that does not hold the study yet (e.g. from a
    ground-truth table, when the db itself was lost with a lent machine): runs.db's rows, and
    Optuna's trials under the same numbers, so that a resumed study numbers its next trial after
    them instead of writing over one. A number no record holds (a skipped trial: not recorded in a
    table) becomes a failed Optuna trial with no parameters."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=ctx.study, storage=store.optuna_storage(), direction="maximize")
    by_number = {r.number: r for r in results}
    dists = distributions(ctx)
    for number in range(max(by_number, default=-1) + 1):
        result = by_number.get(number)
        if result is not None:
            study.enqueue_trial({k.name: result.candidate.params.get(k.name, result.candidate.env.get(k.name))
                                 for k in ctx.space.knobs}, skip_if_exists=False)
        trial = study.ask(dists if result is not None else {})
        assert trial.number == number, f"Optuna numbered the restored trial {trial.number}, not {number}"
        if result is None:
            study.tell(trial, state=TrialState.FAIL)
            continue
        tell(study, trial, result)
        store.save_trial(result)


class Tuner:
    """Runs one study to `trials` launched trials (resuming what runs.db already holds)."""

    def __init__(
        self,
        ctx: TrialContext,
        store: Store,
        pruner: Pruner,
        host_key: str,
        *,
        trials: int,
        seed: int = 0,
        order: Callable[[list[Candidate]], list[Candidate]] | None = None,
        first: list[Candidate] | None = None,
        predict: Callable[[Candidate], dict[str, float]] | None = None,
        reporter: Reporter | None = None,
        budget: TimeBudget | None = None,
        sampler: optuna.samplers.BaseSampler | None = None,
        storage: optuna.storages.BaseStorage | None = None,
        launch: Launch = EngineLaunch(),
        learn_accuracy_classes: bool = True,
        pool: BoxPool | None = None,
        parallel: int = 1,
        per_trial: int = 1,
        boxes: Cluster | None = None,
    ) -> None:
        self.ctx = ctx
        # several trials in flight (autotune.study.parallel), each on `per_trial` boxes leased from
        # `pool` (autotune.study.leases); `boxes`: the cluster file's nodes the pool stands for
        self.pool = pool
        self.parallel = parallel
        self.per_trial = per_trial
        self.boxes = boxes
        self.learn_accuracy_classes = learn_accuracy_classes and ctx.gates.accuracy  # autotune.gates.numerics
        self.store = store
        self.view = StudyTrials(store, ctx.study)  # read once: decisions read it, saves write through
        self.host_key = host_key
        self.trials = trials
        self.seed = seed
        self.order = order
        self.first = first or []
        self.predict = predict
        self.reporter = reporter or SilentReporter()
        self.budget = budget or TimeBudget(None)
        self.sampler = sampler  # None: TPE seeded with `seed` (the study's default)
        self.storage = storage  # None: Optuna's tables in runs.db
        self.launch = launch
        # read once, then extended by this run's own failures: the pruner asks per candidate
        self.failures = store.learned_failures(host_key, ctx.space.engine)
        # numerics classes that failed an accuracy gate in this study (autotune.gates.numerics)
        self.accuracy_failures = store.accuracy_failures(ctx.study)
        # the given checks and this study's learned ones; the caller's pruner is left as it was
        self.pruner = Pruner([*pruner.checks, self._learned_failure, self._failed_class])

    def _judged(self) -> list[TrialResult]:
        """The study's trials with their gates judged again (learned classes count)."""
        return judged_again(self.store, self.ctx.study, self.view.all())

    def _reference(self) -> TrialResult | None:
        return reference_of(self.store, self.ctx.study, self.view.all())

    def _learned_failure(self, candidate: Candidate) -> str | None:
        for failure in self.failures:
            if failure.matches(candidate):
                where = f" in trial {failure.trial}" if failure.trial is not None else ""
                return f"learned: {failure.label()} failed with {failure.failure_class}{where}"
        return None

    def _failed_class(self, candidate: Candidate) -> str | None:
        if not self.learn_accuracy_classes:
            return None
        failure = failed_class(candidate, self.accuracy_failures)
        return f"learned: {skip_reason(failure)}" if failure else None

    def _learn_accuracy(self, result: TrialResult) -> None:
        """A trial's own failed needle or qeval: its numerics class is never the best from now on."""
        if not self.learn_accuracy_classes or failed_class(result.candidate, self.accuracy_failures) is not None:
            return
        if class_status_of_trial(self.ctx.space, result) is not ClassStatus.FAILED:
            return  # nothing failed: no need to read the study back
        failure = failure_of(self.ctx.space, result, self._judged())
        if failure is None:
            return
        failure = self.store.add_accuracy_failure(failure)
        self.accuracy_failures.append(failure)
        self.reporter.learned(f"learned: {skip_reason(failure)}; its candidates are not launched again")
        if failure.differs_from is None:
            self._isolate_class(failure)

    def _isolate_class(self, failure: AccuracyFailure) -> None:
        """Narrow a failed class to the values that fail alone, where that saves launches
        (autotune.gates.numerics): each attempt puts one failed value on the nearest passed class."""
        space, trials = self.ctx.space, self.view.all()
        start = nearest_passed(space, failure.knob_values, failure.gates, trials)
        if start is None:
            return
        passed, differing = start
        attempts: list[ClassAttempt] = []
        found = None
        for values in worth_isolating(space, differing, self._untried_feasible()):
            tried = {**numerics_class(space, passed.candidate), **values}
            attempt = judged_by_trial(space, tried, failure.gates, trials)
            if attempt is None:
                if sum(1 for a in attempts if a.trial is None) >= MAX_ISOLATION_LAUNCHES:
                    break
                if self.budget.refusal(typical_trial_s(trials), "a class isolation launch"):
                    break
                attempt = self._gate_alone(passed, values, failure, len(attempts) + 1)
            attempts.append(attempt.model_copy(update={"values": values}))
            if attempt.failed:
                found = values
                break
        if not attempts:
            return
        launches = sum(1 for a in attempts if a.trial is None)
        record = {"full_class": failure.knob_values, "nearest_trial": passed.number, "differing": differing,
                  "attempts": attempts, "launches": launches, "seconds": round(sum(a.duration_s for a in attempts), 1)}
        update: dict = {}
        if found is None:
            update["isolation"] = ClassIsolation(**record, verdict="no single value failed alone: the class stays whole")
        else:
            values, refuting = widen(space, found, failure.knob_values, failure.gates, self.view.all())
            label = ", ".join(f"{k}={v}" for k, v in values.items())
            verdict = f"{label} fails alone" + (f" (widened by trial(s) {', '.join(map(str, refuting))})" if refuting else "")
            update = {"knob_values": values, "isolation": ClassIsolation(**record, widened_by=refuting, verdict=verdict)}
        isolated = self.store.update_accuracy_failure(failure.model_copy(update=update))
        self.accuracy_failures = [isolated if f.id == failure.id else f for f in self.accuracy_failures]
        self.reporter.learned(f"isolated {failure.label()}: {isolated.isolation.summary()}")

    def _gate_alone(self, passed: TrialResult, values: dict[str, Scalar], failure: AccuracyFailure,
                    step: int) -> ClassAttempt:
        """Launch the passed trial's candidate with `values` put on it and judge its accuracy gates."""
        candidate = make_candidate(self.ctx.space, {**self._knob_values(passed.candidate), **values})
        logs = self.ctx.logs_dir / "class-isolation" / f"{failure.trial:03d}-{step}"
        ctx = gates_relaunch_context(self.ctx).model_copy(update={"logs_dir": logs})
        self.reporter.relaunch_started(Relaunch.isolation(candidate, failure.trial))
        with on_boxes(self.pool, self.per_trial, ctx, self.boxes) as (leased, _):
            result = self.launch(LaunchRequest(leased, candidate, failure.trial, Purpose.CLASS_ISOLATION,
                                               events=self.reporter.trial_event))
        gates = evaluate_gates(result, self._reference(), self.ctx.space.gates)
        judged = own_accuracy(result, gates)
        failed = failed_on(judged, failure.gates) is True
        evidence = [f"{g.gate}: {g.detail}" for g in judged] or [f"the launch failed: {result.reason}"]
        return ClassAttempt(values=values, failed=failed, duration_s=round(result.duration_s, 1), evidence=evidence)

    def _open(self) -> optuna.Study:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        # with trials in flight, TPE's constant liar: a running trial counts as a poor result, so
        # the sampler does not propose its neighbourhood again before it ends
        sampler = self.sampler or optuna.samplers.TPESampler(
            seed=self.seed, n_startup_trials=min(8, max(2, self.trials // 2)),
            **({"constant_liar": True} if self.parallel > 1 else {}),
        )
        return optuna.create_study(
            study_name=self.ctx.study,
            storage=self.storage or self.store.optuna_storage(),
            direction="maximize",
            sampler=sampler,
            load_if_exists=True,
        )

    def _launched(self, trials: list[TrialResult]) -> int:
        """Launches that count toward the study's trials: finished ones, and each candidate cut
        ATTEMPTS_BEFORE_FAILURE times (its failure); a cut attempt still to be re-run does not."""
        finished = sum(1 for t in trials if t.status in ("ok", "failed"))
        cut = Counter(t.candidate.key() for t in trials if t.status in CUT_STATUSES)
        done = {t.candidate.key() for t in trials if t.status in ("ok", "failed")}
        return finished + sum(1 for key, n in cut.items() if n >= ATTEMPTS_BEFORE_FAILURE and key not in done)

    def _cut(self, study: optuna.Study, number: int, candidate: Candidate, status: str, reason: str,
             boxes: tuple[int, ...] = ()) -> None:
        """Record an attempt that ended without a result: in runs.db, and in Optuna as FAIL."""
        self.view.save(
            TrialResult(study=self.ctx.study, number=number, candidate=candidate, status=status, reason=reason,  # type: ignore[arg-type]
                        boxes=list(boxes))
        )
        for frozen in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if frozen.number == number:
                _fail_running(study, frozen, status)

    def _account_for_cut_attempts(self, study: optuna.Study) -> list[Candidate]:
        """On resume (this process owns the study, so no other runs it): launches of a process
        that died mid-trial become `crashed`; Optuna trials left RUNNING become FAIL. Returns the
        candidates to re-run: cut once, never finished."""
        for row in self.store.open_attempts(self.ctx.study):
            prior = self.view.get(row["number"])
            candidate = prior.candidate if prior else None
            if candidate is None:
                match = [c for c in enumerate_candidates(self.ctx.space) if c.key() == row["candidate_key"]]
                candidate = match[0] if match else None
            if candidate is None:
                self.store.end_attempt(self.ctx.study, row["number"])
                continue
            self._cut(
                study, row["number"], candidate, "crashed",
                f"autotune (PID {row['pid']} on {row['host']}) ended during this trial without a result "
                "(killed or crashed)", attempt_boxes(row),
            )
        for frozen in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            _fail_running(study, frozen, "crashed")  # asked, never launched: nothing to re-run
        trials = self.view.all()
        finished = {t.candidate.key() for t in trials if t.status in ("ok", "failed")}
        cut = Counter(t.candidate.key() for t in trials if t.status in CUT_STATUSES)
        again: dict[str, Candidate] = {}
        for t in trials:  # number order: the baseline (trial 0) first
            key = t.candidate.key()
            if key in finished:
                continue
            if t.status == ENVIRONMENT or (t.status in CUT_STATUSES and cut[key] < ATTEMPTS_BEFORE_FAILURE):
                again.setdefault(key, t.candidate)
        return list(again.values())

    def _queue_first(self, study: optuna.Study, candidates: list[Candidate]) -> None:
        """Put `candidates` (re-runs) ahead of what is queued already: Optuna's queue is first in,
        first out, so the queued trials are taken out (told PRUNED, `autotune_status` requeued)
        and queued again behind them."""
        if not candidates:
            return
        held = []
        for _ in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            trial = study.ask(distributions(self.ctx))
            held.append(dict(trial.params))
            trial.set_user_attr(STATUS_ATTR, "requeued")
            study.tell(trial, state=TrialState.PRUNED)
        for candidate in candidates:
            self._enqueue(study, candidate)
        for params in held:
            study.enqueue_trial(params, skip_if_exists=False)

    def _untried_feasible(self) -> list[Candidate]:
        tried = {t.candidate.key() for t in self.view.all()}
        fresh = [c for c in enumerate_candidates(self.ctx.space) if c.key() not in tried]
        return [c for c in fresh if self.pruner.reason(c) is None]

    def _knob_values(self, candidate: Candidate) -> dict[str, Scalar]:
        return knob_values(self.ctx.space, candidate)

    def _enqueue(self, study: optuna.Study, candidate: Candidate) -> None:
        study.enqueue_trial(self._knob_values(candidate), skip_if_exists=False)

    def _enqueue_missing(self, study: optuna.Study, candidates: list[Candidate]) -> None:
        """On resume: queue the requested first candidates that were neither measured nor queued."""
        queued = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
        waiting = [t.system_attrs.get("fixed_params", t.params) for t in queued]
        for candidate in candidates:
            measured = self.view.by_candidate(candidate) is not None
            if not measured and self._knob_values(candidate) not in waiting:
                self._enqueue(study, candidate)

    def run(self) -> StudyOutcome:
        space = self.ctx.space
        study = self._open()
        rerun = self._account_for_cut_attempts(study)
        existing = self.view.all()
        launched = self._launched(existing)
        remaining = self._untried_feasible()
        if existing:
            self._queue_first(study, rerun)
            self._enqueue_missing(study, self.first)
        else:
            if not remaining and self.pruner.reason(baseline(space)) is not None:
                raise NoValidCandidate(
                    f"space {space.name!r}: every candidate is ruled out before launching "
                    f"(baseline: {self.pruner.reason(baseline(space))})"
                )
            ranked = self.order(remaining) if self.order else []
            for candidate, _ in queued_first(baseline(space), self.first, ranked):
                self._enqueue(study, candidate)
        rng = random.Random(self.seed)
        exhausted = False
        stopped: str | None = None
        typical = typical_trial_s(existing)
        dists = distributions(self.ctx)
        launches = Launches(self.parallel, self.pool)
        twins: dict[str, list[optuna.Trial]] = {}  # asked again while in flight: told its result when it ends
        try:
            while True:
                while not stopped and not exhausted and launched < self.trials and not launches.full():
                    stopped = self.budget.refusal(typical)
                    if stopped:
                        break
                    busy = {f.candidate.key() for f in launches.flights()}
                    picked = self._next(study, dists, rng, busy, twins)
                    if picked is None:
                        exhausted = not busy  # with trials in flight: ask again once one ends
                        break
                    launched += 1
                    self._start(study, launches, *picked, launched)
                if not launches.running:
                    break
                for flight, future in launches.next_done():
                    try:
                        result = future.result()
                    except Exception as exc:  # an error of autotune itself, in that launch's thread
                        self._cut(study, flight.number, flight.candidate, "crashed",
                                  f"{type(exc).__name__}: {exc} ({flight.stage})", flight.boxes)
                        raise
                    done = self._finish(study, flight, result, twins.pop(flight.candidate.key(), []))
                    typical = typical_trial_s(done)
                    shared = environment_failed(done, result, baseline(space)) if result.status == "failed" else []
                    if shared:
                        stopped = stopped or self._environment(shared).describe()
                    if self.parallel > 1 and launches.flights():
                        self._report_flights(launches.flights(), typical, launched)
        except KeyboardInterrupt:  # not measured: re-run once when the study resumes
            self._cut_in_flight(study, launches, "interrupted", lambda f: f"interrupted (Ctrl-C / SIGTERM) {f.stage}")
            raise
        except Exception as exc:
            self._cut_in_flight(study, launches, "crashed", lambda f, e=exc: f"{type(e).__name__}: {e} ({f.stage})")
            raise
        finally:
            launches.close()
        if self.ctx.gates is GatePolicy.AT_END:
            priced = gates_relaunch_s(self.view.all(), space.objective,
                                      self.store.relaunch_seconds(self.ctx.study))
            stopped = self._gate_the_head(priced) or stopped
        return outcome_of(self.store, self.ctx.study, exhausted, stopped, trials=self.view.all())

    def _next(self, study: optuna.Study, dists: dict[str, CategoricalDistribution], rng: random.Random,
              busy: set[str], twins: dict[str, list[optuna.Trial]]) -> tuple[optuna.Trial, Candidate] | None:
        """Ask Optuna until it proposes a candidate to launch; None when nothing is left to launch
        (every feasible candidate tried or, with several in flight, in flight). A candidate measured
        already is told its stored score, one ruled out is skipped (PRUNED), one in flight waits
        for that flight's result."""
        idle = 0
        while True:
            if idle >= MAX_IDLE_ASKS:
                remaining = [c for c in self._untried_feasible() if c.key() not in busy]
                if not remaining:
                    return None
                self._enqueue(study, rng.choice(remaining))
                idle = 0
            trial = study.ask(dists)
            candidate = make_candidate(self.ctx.space, dict(trial.params))
            prior = self.view.by_candidate(candidate)
            if prior is not None:
                tell(study, trial, prior)
                idle += 1
                continue
            if candidate.key() in busy:
                twins.setdefault(candidate.key(), []).append(trial)
                idle += 1
                continue
            reason = self.pruner.reason(candidate)
            if reason is not None:
                skipped = TrialResult(
                    study=self.ctx.study, number=trial.number, candidate=candidate, status="skipped", reason=reason
                )
                self.view.save(skipped)
                study.tell(trial, state=TrialState.PRUNED)
                self.reporter.trial_skipped(skipped)
                idle += 1
                continue
            return trial, candidate

    def _start(self, study: optuna.Study, launches: Launches, trial: optuna.Trial, candidate: Candidate,
               launched: int) -> None:
        """Lease the candidate's boxes, record the attempt on them, and launch it (in a thread when
        several are in flight)."""
        self.reporter.trial_started(trial.number, launched, self.trials, candidate)
        lease = self.pool.lease(self.per_trial) if self.pool is not None else None
        ctx = leased_context(self.ctx, lease, self.boxes)
        flight = Flight(trial=trial, candidate=candidate, ctx=ctx, boxes=lease.boxes if lease else (),
                        wait_needle=self._reference_needle_waits(trial.number))

        def events(text: str) -> None:
            flight.stage = f"at: {text}"
            self.reporter.trial_event(text)

        donor = self._accuracy_donor(candidate, trial.number)
        # reusing costs nothing, and a class not gated yet is gated at once: no deferral
        defer = donor is None and not self._gate_class_now(candidate)
        check = self._dominated_check(trial.number, defer=defer)
        self.store.begin_attempt(self.ctx.study, trial.number, candidate, socket.gethostname(), os.getpid(),
                                 boxes=flight.boxes)
        launch_ctx = reference_context(ctx) if flight.wait_needle else ctx
        request = LaunchRequest(launch_ctx, candidate, trial.number, events=events, dominated=check, reuse=donor)
        launches.submit(flight, lease, lambda: self.launch(request))
        if self.parallel > 1:
            self._report_flights(launches.flights(), typical_trial_s(self.view.all()), launched)

    def _finish(self, study: optuna.Study, flight: Flight, result: TrialResult,
                twins: list[optuna.Trial]) -> list[TrialResult]:
        """Judge, save and learn from one trial's result; tell Optuna. Returns the study's trials now."""
        space, trial, candidate = self.ctx.space, flight.trial, flight.candidate
        before = [t for t in self.view.all() if t.number != trial.number]
        reference = reference_of(self.store, self.ctx.study, [*before, result])
        predicted = self.predict(candidate) if self.predict else {}
        if flight.wait_needle and result.status == "ok":
            result = result.model_copy(update={"deferred": REFERENCE_NEEDLE})
        gates = evaluate_gates(result, reference, space.gates, self.store.study_accuracy(self.ctx.study),
                               baseline_of([*before, result]), self.accuracy_failures)
        result = result.model_copy(update={"gates": gates, "predicted": predicted, "boxes": list(flight.boxes)})
        self.view.save(result)
        self._learn_accuracy(result)
        if result.status == "ok" and result.objective:
            self.store.add_launch_sample(
                self.host_key, space.engine, self.ctx.study, candidate, result.objective, "trial", trial.number,
                metric=space.objective.sample_metric, energy=result.energy, boxes=flight.boxes,
            )
        # isolating a failure no signature pins on knobs launches the engine: on boxes of its own;
        # a failure the baseline shares teaches no knob value (the study stops on it instead)
        isolates = result.failure is not None and not result.failure.implicates
        shared = result.status == "failed" and any(
            t.number == result.number for t in shared_failure([*before, result], baseline(space)))
        with on_boxes(self.pool if isolates and not shared else None, self.per_trial, flight.ctx, self.boxes) as (ctx, _):
            if not shared and learn_from_failure(ctx, self.store, self.host_key, result, baseline(space),
                                                 self.launch, self.reporter.trial_event):
                self.failures = self.store.learned_failures(self.host_key, space.engine)
        tell(study, trial, result)
        for twin in twins:  # the same candidate, asked while this one ran
            tell(study, twin, result)
        done = [*before, result]  # the study's trials now: read once above, this one just saved
        ranked = rank(done)
        self.reporter.trial_finished(result, ranked[0] if ranked else None)
        return done

    def _environment(self, shared: list[TrialResult]) -> EnvironmentFailure:
        """Keep `shared` (failed for a cause every candidate shares) as history, each with the fix the
        engine knows for this host: not measurements, re-run on resume, teaching no knob value."""
        assert shared[0].failure is not None
        fix = self.ctx.engine.environment_fix(shared[0].failure) or shared[0].failure.fix
        for t in shared:
            self.view.save(as_environment(t, fix))
        if self.store.forget_failures(self.ctx.study, [t.number for t in shared]):
            self.failures = self.store.learned_failures(self.host_key, self.ctx.space.engine)
        found = environment_of(self.view.all())
        assert found is not None
        return found

    def _report_flights(self, flights: list[Flight], typical: float | None, launched: int) -> None:
        left = max(0, self.trials - launched)
        eta = None
        if typical is not None and flights:
            now = time.monotonic()
            running = max(max(0.0, typical - (now - f.started)) for f in flights)
            eta = running + typical * math.ceil(left / self.parallel)
        self.reporter.in_flight(in_flight_text(flights, eta))

    def _cut_in_flight(self, study: optuna.Study, launches: Launches, status: str,
                       reason: Callable[[Flight], str]) -> None:
        """Every trial still in flight when the controller stops: its engine stopped, its attempt
        recorded as `status` on its boxes (re-run once on resume)."""
        cut = [(flight, reason(flight)) for flight in launches.flights()]  # the stage each was cut in
        launches.stop(self.launch.stop_all)
        for flight, why in cut:
            self._cut(study, flight.number, flight.candidate, status, why, flight.boxes)
        launches.running.clear()

    def _gate_the_head(self, typical: float | None) -> str | None:
        """The deferred gates, run on the head of the ranking only (autotune.study.deferred)."""

        def judged() -> list[TrialResult]:
            return self._judged()

        held: dict[int, tuple[int, ...]] = {}  # the boxes each relaunch ran on: its launch sample's noise group

        def relaunch(trial: TrialResult, logs: Path) -> TrialResult:
            self.reporter.relaunch_started(Relaunch.gates(trial.candidate, trial.number))
            ctx = gates_relaunch_context(self.ctx).model_copy(update={"logs_dir": logs})
            donor = self._accuracy_donor(trial.candidate, trial.number)
            with on_boxes(self.pool, self.per_trial, ctx, self.boxes) as (leased, boxes):
                held[trial.number] = boxes
                return self.launch(LaunchRequest(leased, trial.candidate, trial.number, Purpose.GATES,
                                                 events=self.reporter.trial_event, reuse=donor))

        def save(merged: TrialResult, result: TrialResult) -> None:
            gates = evaluate_gates(merged, self._reference(), self.ctx.space.gates,
                                   self.store.study_accuracy(self.ctx.study), baseline_of(self.view.all()),
                                   self.accuracy_failures)
            merged = merged.model_copy(update={"gates": gates})
            self.view.save(merged)
            self._learn_accuracy(merged)
            if result.status == "ok" and result.objective:
                self.store.add_launch_sample(self.host_key, self.ctx.space.engine, self.ctx.study, merged.candidate,
                                             result.objective, "gates relaunch", merged.number,
                                             metric=self.ctx.space.objective.sample_metric, energy=result.energy,
                                             boxes=held.get(merged.number, ()))
            ranked = rank(judged())
            self.reporter.trial_finished(merged, ranked[0] if ranked else None)

        return gate_the_head(judged, relaunch, save, lambda: self.budget.refusal(typical, "a gates relaunch"),
                             self.ctx.logs_dir)

    def _reference_needle_waits(self, number: int) -> bool:
        """With gates at the end the qeval reference runs qeval at once and defers its needle, unless
        the space has numerics-neutral knobs: then its siblings reuse its whole accuracy for free."""
        space = self.ctx.space
        return (self.ctx.gates is GatePolicy.AT_END and space.gates.needle is not None
                and space.gates.qeval is not None and not any(k.numerics_neutral for k in space.knobs)
                and number == self.store.study_reference(self.ctx.study))

    def _dominated_check(self, number: int, defer: bool = True) -> DominatedCheck | None:
        """The rule that lets trial `number` skip its gates (None: they run): never for the qeval
        reference; against an incumbent that passed its gates, or with gates at the end (and
        `defer`) one that may still pass them, the trial deferring its own when it is faster."""
        if not self.ctx.gates.skips_dominated or number == self.store.study_reference(self.ctx.study):
            return None
        trials = self._judged()  # gates judged again: learned classes count
        noise = self.store.launch_noise(self.host_key, self.ctx.space.engine, self.ctx.space.objective.sample_metric)
        if self.ctx.gates is GatePolicy.AT_END:  # the incumbent may have its own gates still to run
            head = optimistic_incumbent(trials)
            check = dominated_check(head, noise, incumbent_unchecked=bool(head and head.deferred))
            return lazy(check) if defer else check
        ranked = rank(trials)
        return dominated_check(ranked[0] if ranked else None, noise)

    def _gate_class_now(self, candidate: Candidate) -> bool:
        """Whether the candidate's gates run at once should it lead (autotune.gates.numerics): its class is
        not gated yet and has other candidates left, which a failure would save from launching."""
        if not self.learn_accuracy_classes:
            return False
        trials = self.view.all()
        if class_status(self.ctx.space, candidate, trials, self.accuracy_failures) is not ClassStatus.UNGATED:
            return False
        mine = numerics_class(self.ctx.space, candidate)
        return any(numerics_class(self.ctx.space, c) == mine for c in self._untried_feasible() if c.key() != candidate.key())

    def _accuracy_donor(self, candidate: Candidate, number: int) -> TrialResult | None:
        """A trial of this study whose accuracy results `candidate` may reuse: it measured them
        itself and differs only in knobs the space marks numerics-neutral. Never for the reference."""
        neutral = {k.name for k in self.ctx.space.knobs if k.numerics_neutral}
        if not neutral or not self.ctx.gates.accuracy or number == self.store.study_reference(self.ctx.study):
            return None
        mine = {k: v for k, v in self._knob_values(candidate).items() if k not in neutral}
        for t in self.view.all():
            measured = (t.status == "ok" and t.accuracy_from is None and (t.needle or t.qeval) and not t.dominated
                        and not t.deferred)  # a deferred gate is not evidence to lend
            if measured and {k: v for k, v in self._knob_values(t.candidate).items() if k not in neutral} == mine:
                return t
        return None
