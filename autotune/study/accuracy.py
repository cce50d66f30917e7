"""The study's accuracy work, as its trials run: which gates a trial runs in its own launch (the
skip rule, a numerics-neutral sibling's accuracy to reuse, the qeval reference's needle), the
numerics classes that fail (learned from a trial's own gates, narrowed by launches of their own:
autotune/gates/numerics.py), and the deferred gates of the head of the ranking at the end
(autotune/study/deferred.py).

The Tuner (autotune/study/tuner.py) holds one StudyAccuracy and asks it; it launches through the
study's Launch on the study's boxes, and stores what it learns as the Tuner does, through the
study's view of its trials.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from autotune.gates.dominated import DominatedCheck, dominated_check
from autotune.gates.numerics import (
    MAX_ISOLATION_LAUNCHES, ClassStatus, class_status, class_status_of_trial, failed_class, failed_on, failure_of,
    judged_by_trial, knob_values, nearest_passed, numerics_class, own_accuracy, skip_reason, widen, worth_isolating,
)
from autotune.gates.score import evaluate_gates, rank
from autotune.models import (
    AccuracyFailure, Candidate, ClassAttempt, ClassIsolation, GateOutcome, GatePolicy, Scalar, TrialResult,
)
from autotune.space.candidates import make_candidate
from autotune.store import Store
from autotune.study.budget import TimeBudget, typical_trial_s
from autotune.study.deferred import gate_the_head, gates_relaunch_context, lazy, optimistic_incumbent
from autotune.study.outcome import baseline_of, judged_again, reference_of
from autotune.study.parallel import Boxes
from autotune.study.relaunches import Relaunch
from autotune.study.reporter import Reporter
from autotune.study.view import StudyTrials
from autotune.trial.context import TrialContext
from autotune.trial.launch import Launch, LaunchRequest, Purpose
from autotune.verdict.noise import NoiseKey


class StudyAccuracy:
    """The accuracy gates of one study's trials: what each trial runs, what a failure teaches,
    and the gates deferred to the end. `untried()` gives the feasible candidates not tried yet
    (the Tuner's), which a failed class would save from launching."""

    def __init__(
        self, ctx: TrialContext, store: Store, view: StudyTrials, noise: NoiseKey, *, launch: Launch, boxes: Boxes,
        reporter: Reporter, budget: TimeBudget, untried: Callable[[], list[Candidate]], learn_classes: bool = True,
    ) -> None:
        self.ctx, self.store, self.view, self.noise = ctx, store, view, noise
        self.launch, self.boxes, self.reporter, self.budget, self.untried = launch, boxes, reporter, budget, untried
        self.learn_classes = learn_classes and ctx.gates.accuracy
        #: numerics classes that failed an accuracy gate in this study (autotune.gates.numerics)
        self.failures: list[AccuracyFailure] = store.accuracy_failures(ctx.study)

    def judged(self) -> list[TrialResult]:
        """The study's trials with their gates judged again (learned classes count)."""
        return judged_again(self.store, self.ctx.study, self.view.all())

    def reference(self, trials: list[TrialResult] | None = None) -> TrialResult | None:
        """qeval's reference among `trials` (default: the study's trials now)."""
        return reference_of(self.store, self.ctx.study, self.view.all() if trials is None else trials)

    def gates(self, result: TrialResult, trials: list[TrialResult]) -> list[GateOutcome]:
        """`result`'s gates judged among the study's `trials` (the result's own row among them)."""
        return evaluate_gates(result, self.reference(trials), self.ctx.space.gates,
                              self.store.study_accuracy(self.ctx.study), baseline_of(trials), self.failures)

    # ---------------------------------------------------------------- what a trial runs

    def failed_class(self, candidate: Candidate) -> str | None:
        """A pruner check: the candidate's numerics class failed accuracy in this study."""
        if not self.learn_classes:
            return None
        failure = failed_class(candidate, self.failures)
        return f"learned: {skip_reason(failure)}" if failure else None

    def reference_needle_waits(self, number: int) -> bool:
        """With gates at the end the qeval reference runs qeval at once and defers its needle, unless
        the space has numerics-neutral knobs: then its siblings reuse its whole accuracy for free."""
        space = self.ctx.space
        return (self.ctx.gates is GatePolicy.AT_END and space.gates.needle is not None
                and space.gates.qeval is not None and not any(k.numerics_neutral for k in space.knobs)
                and number == self.store.study_reference(self.ctx.study))

    def dominated_check(self, number: int, defer: bool = True) -> DominatedCheck | None:
        """The rule that lets trial `number` skip its gates (None: they run): never for the qeval
        reference; against an incumbent that passed its gates, or with gates at the end (and
        `defer`) one that may still pass them, the trial deferring its own when it is faster."""
        if not self.ctx.gates.skips_dominated or number == self.store.study_reference(self.ctx.study):
            return None
        trials = self.judged()  # gates judged again: learned classes count
        noise = self.store.launch_noise(self.noise)
        if self.ctx.gates is GatePolicy.AT_END:  # the incumbent may have its own gates still to run
            head = optimistic_incumbent(trials)
            check = dominated_check(head, noise, incumbent_unchecked=bool(head and head.deferred))
            return lazy(check) if defer else check
        ranked = rank(trials)
        return dominated_check(ranked[0] if ranked else None, noise)

    def gate_class_now(self, candidate: Candidate) -> bool:
        """Whether the candidate's gates run at once should it lead (autotune.gates.numerics): its class is
        not gated yet and has other candidates left, which a failure would save from launching."""
        if not self.learn_classes:
            return False
        trials = self.view.all()
        if class_status(self.ctx.space, candidate, trials, self.failures) is not ClassStatus.UNGATED:
            return False
        mine = numerics_class(self.ctx.space, candidate)
        return any(numerics_class(self.ctx.space, c) == mine for c in self.untried() if c.key() != candidate.key())

    def donor(self, candidate: Candidate, number: int) -> TrialResult | None:
        """A trial of this study whose accuracy results `candidate` may reuse: it measured them
        itself and differs only in knobs the space marks numerics-neutral. Never for the reference."""
        neutral = {k.name for k in self.ctx.space.knobs if k.numerics_neutral}
        if not neutral or not self.ctx.gates.accuracy or number == self.store.study_reference(self.ctx.study):
            return None
        mine = {k: v for k, v in knob_values(self.ctx.space, candidate).items() if k not in neutral}
        for t in self.view.all():
            measured = (t.status == "ok" and t.accuracy_from is None and (t.needle or t.qeval) and not t.dominated
                        and not t.deferred)  # a deferred gate is not evidence to lend
            if measured and {k: v for k, v in knob_values(self.ctx.space, t.candidate).items() if k not in neutral} == mine:
                return t
        return None

    # ---------------------------------------------------------------- what a failure teaches

    def learn(self, result: TrialResult) -> None:
        """A trial's own failed needle or qeval: its numerics class is never the best from now on."""
        if not self.learn_classes or failed_class(result.candidate, self.failures) is not None:
            return
        if class_status_of_trial(self.ctx.space, result) is not ClassStatus.FAILED:
            return  # nothing failed: no need to read the study back
        failure = failure_of(self.ctx.space, result, self.judged())
        if failure is None:
            return
        failure = self.store.add_accuracy_failure(failure)
        self.failures.append(failure)
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
        for values in worth_isolating(space, differing, self.untried()):
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
        self.failures = [isolated if f.id == failure.id else f for f in self.failures]
        self.reporter.learned(f"isolated {failure.label()}: {isolated.isolation.summary()}")

    def _gate_alone(self, passed: TrialResult, values: dict[str, Scalar], failure: AccuracyFailure,
                    step: int) -> ClassAttempt:
        """Launch the passed trial's candidate with `values` put on it and judge its accuracy gates."""
        candidate = make_candidate(self.ctx.space, {**knob_values(self.ctx.space, passed.candidate), **values})
        logs = self.ctx.logs_dir / "class-isolation" / f"{failure.trial:03d}-{step}"
        ctx = gates_relaunch_context(self.ctx).model_copy(update={"logs_dir": logs})
        self.reporter.relaunch_started(Relaunch.isolation(candidate, failure.trial))
        result = self.boxes.launch(self.launch, LaunchRequest(ctx, candidate, failure.trial, Purpose.CLASS_ISOLATION,
                                                              events=self.reporter.trial_event))
        gates = evaluate_gates(result, self.reference(), self.ctx.space.gates)
        judged = own_accuracy(result, gates)
        failed = failed_on(judged, failure.gates) is True
        evidence = [f"{g.gate}: {g.detail}" for g in judged] or [f"the launch failed: {result.reason}"]
        return ClassAttempt(values=values, failed=failed, duration_s=round(result.duration_s, 1), evidence=evidence)

    # ---------------------------------------------------------------- the gates deferred to the end

    def gate_the_head(self, typical: float | None) -> str | None:
        """The deferred gates, run on the head of the ranking only (autotune.study.deferred); why it
        stopped before the head was checked (the time budget), else None."""

        def relaunch(trial: TrialResult, logs: Path) -> TrialResult:
            self.reporter.relaunch_started(Relaunch.gates(trial.candidate, trial.number))
            ctx = gates_relaunch_context(self.ctx).model_copy(update={"logs_dir": logs})
            return self.boxes.launch(self.launch, LaunchRequest(
                ctx, trial.candidate, trial.number, Purpose.GATES, events=self.reporter.trial_event,
                reuse=self.donor(trial.candidate, trial.number)))

        def save(merged: TrialResult, result: TrialResult) -> None:
            merged = merged.model_copy(update={"gates": self.gates(merged, self.view.all())})
            self.view.save(merged)
            self.learn(merged)
            if result.status == "ok" and result.objective:  # a launch-noise sample of the boxes it ran on
                self.store.add_launch_sample(self.noise, self.ctx.study, merged.candidate, result.objective,
                                             "gates relaunch", merged.number, energy=result.energy,
                                             boxes=tuple(result.boxes))
            ranked = rank(self.judged())
            self.reporter.trial_finished(merged, ranked[0] if ranked else None)

        return gate_the_head(self.judged, relaunch, save, lambda: self.budget.refusal(typical, "a gates relaunch"),
                             self.ctx.logs_dir)
