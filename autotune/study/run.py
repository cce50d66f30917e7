"""One run of a study (`autotune search`), from its first launch to its answer.

A run goes: the trials (the Tuner, autotune/study/tuner.py, with the gates deferred to their end:
autotune/study/accuracy.py), the confirmation of the best against the baseline
(autotune/study/confirm.py), the baseline's noise relaunches, the draft schedule
(autotune/study/draft_schedule.py). The outcome is judged once, when the trials end; the later
stages read it, and the answer takes the rows they stored (the confirmation, the draft schedule,
the launch noise) without judging the trials again.

The run owns what the stages share: the store, the noise key (this host, engine and objective
metric), the time budget, the box pool, the reporter, and the Launch every engine start goes
through (autotune/trial/launch.py). The caller owns the study (autotune/study/lock.py):
commands/search.py takes the lock and calls `StudyRun(...).run()`.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator

from autotune.models import ConfirmationLaunch, DraftScheduleReport, TrialResult
from autotune.planner.prior import planner_order
from autotune.planner.roofline import estimate
from autotune.space.fingerprint import check_same_experiment
from autotune.space.fingerprint import fingerprint as space_fingerprint
from autotune.store import Store
from autotune.study.budget import TimeBudget, typical_trial_s
from autotune.study.confirm import confirm, decode_only
from autotune.study.draft_schedule import compose, confirm_schedule, refusal
from autotune.study.leases import BoxPool
from autotune.study.outcome import StudyOutcome
from autotune.study.parallel import Boxes
from autotune.study.prepared import RunSettings, PreparedStudy
from autotune.study.relaunch_cost import relaunch_s
from autotune.study.relaunches import Relaunch
from autotune.study.reporter import Reporter, SilentReporter
from autotune.study.tuner import Tuner
from autotune.trial.launch import Launch, LaunchRequest, Purpose
from autotune.verdict.confirmation import rounds_done
from autotune.verdict.noise import NoiseKey


class StudyRun:
    """One run of `plan`'s study as `settings` say, every launch through `launch`."""

    def __init__(self, plan: PreparedStudy, settings: RunSettings, *, launch: Launch, reporter: Reporter | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        assert plan.store is not None, "a run writes its study: the plan of a dry run has no store"
        self.plan, self.settings, self.launch = plan, settings, launch
        self.store: Store = plan.store
        self.reporter = reporter or SilentReporter()
        self.budget = TimeBudget(settings.time_budget_s, clock)
        self.noise = NoiseKey(host=plan.host.key(), engine=plan.space.engine, metric=plan.space.objective.sample_metric)
        self.boxes = Boxes(count=plan.nodes, cluster=plan.pool_cluster)  # the pool joins when the run starts

    def run(self) -> StudyOutcome:
        """The trials, their deferred gates, the confirmation, the noise relaunches, the draft schedule."""
        self._record()
        with self._pool() as pool:
            self.boxes = Boxes(pool, self.plan.nodes, self.plan.pool_cluster)
            outcome = self._tuner().run()  # the trials, then their deferred gates: the outcome, judged
            stopped = self._confirm(outcome)
            # after the confirmation: its rounds relaunched the baseline, and those launches count
            self._relaunch_for_noise(outcome)
            self.store.save_draft_schedule(self._draft_schedule(outcome))
        name = self.plan.study
        return outcome.model_copy(update={"stopped": stopped, "confirmation": self.store.confirmation(name),
                                          "draft_schedule": self.store.draft_schedule(name),
                                          "noise": self.store.launch_noise(self.noise)})

    def _record(self) -> None:
        """The study's row, its host and its qeval reference in runs.db; a resumed study must keep
        the space it was made from (checked again here: another process may have made it since)."""
        plan, store = self.plan, self.store
        stored = store.study_space(plan.study)
        if stored is not None:
            check_same_experiment(plan.study, stored, plan.space)
        store.save_host(plan.host)
        store.save_study(plan.study, plan.space, plan.hardware.name, plan.nodes, self.noise.host,
                         space_fingerprint(plan.space), accuracy=plan.ctx.gates.accuracy)
        if self.settings.qeval_reference is not None:
            store.set_study_reference(plan.study, self.settings.qeval_reference)

    @contextlib.contextmanager
    def _pool(self) -> Iterator[BoxPool | None]:
        """The study's box pool for as long as it launches (None: the boxes of one launch, which
        every launch takes in turn: no leases, as always)."""
        if self.plan.boxes <= self.plan.nodes:
            yield None
            return
        with BoxPool.local(self.plan.boxes) as pool:
            yield pool

    def _tuner(self) -> Tuner:
        plan, settings = self.plan, self.settings
        return Tuner(
            plan.ctx, self.store, plan.pruner, self.noise.host, trials=settings.trials, seed=settings.seed,
            order=planner_order(plan.space, plan.hardware, plan.nodes), first=plan.first,
            predict=lambda c: estimate(plan.space, c, plan.hardware, plan.nodes).predicted(),
            reporter=self.reporter, budget=self.budget, launch=self.launch, boxes=self.boxes, parallel=plan.parallel,
        )

    def _relaunch_s(self, outcome: StudyOutcome) -> float | None:
        """One objective-only relaunch here (autotune/study/relaunch_cost.py)."""
        return relaunch_s(outcome.trials, self.plan.space.objective, self.store.relaunch_seconds(self.plan.study))

    def _confirm(self, outcome: StudyOutcome) -> str | None:
        """The best trial against the baseline in interleaved relaunches (autotune/study/confirm.py):
        the rounds of this pair that earlier sittings ran count, and only the missing ones are run,
        both arms on the same boxes held for all of them, so that a faster box cannot pass for a
        better config. Returns why the run ended before its end, as it stands after."""
        store, study, total = self.store, self.plan.study, self.settings.confirm_rounds
        best, base = outcome.best, outcome.baseline
        if total <= 0 or best is None or base is None or base.status != "ok" or best.number == base.number:
            return outcome.stopped
        earlier = store.confirmation_launches(study, best.number, base.number)
        failed_before = any(x.objective is None for x in earlier)  # that pair's verdict stays "no winner"
        missing = 0 if failed_before else max(0, total - rounds_done(earlier))
        each = self._relaunch_s(outcome)
        round_s = 2 * each if each else None
        rounds = self.budget.how_many_fit(missing, round_s)
        if rounds == 0 and not earlier:
            if missing == 0:
                return outcome.stopped
            return f"confirmation skipped: {self.budget.refusal(round_s, 'a confirmation round')}"
        # the verdict pools its own launches with the host's noise: the prior must not hold them again
        own = frozenset(x.sample_id for x in earlier if x.sample_id is not None)
        prior = store.launch_noise(self.noise, exclude=own)
        with (self.boxes if rounds else Boxes()).leased(self.plan.ctx) as (ctx, held):

            def keep(arm: TrialResult, round_: int, again: TrialResult, seconds: float) -> ConfirmationLaunch:
                value = again.objective
                sample = None if value is None else store.add_launch_sample(
                    self.noise, study, arm.candidate, value, "confirm", arm.number, energy=again.energy, boxes=held)
                return store.add_confirmation_launch(ConfirmationLaunch(
                    id=0, study=study, best_trial=best.number, baseline_trial=base.number, round=round_,
                    trial=arm.number, objective=value, duration_s=round(seconds, 3), sample_id=sample,
                ))

            store.save_confirmation(confirm(self.launch, ctx, best, base, rounds, keep, reporter=self.reporter,
                                            prior=prior, earlier=earlier, total=total, clock=self.budget.clock,
                                            slowed=lambda: store.slowed_samples(self.noise)))
        if rounds < missing:
            return outcome.stopped or (
                f"confirmation: {rounds_done(earlier) + rounds} of {total} rounds so far, the time budget left "
                f"{missing - rounds} for a resume ({self.budget.refusal(round_s, 'a confirmation round')})")
        return outcome.stopped

    def _relaunch_for_noise(self, outcome: StudyOutcome) -> None:
        """Relaunch the baseline (decode only) until it has `noise_relaunches` + 1 launches in this
        study, its confirmation rounds' launches counted: the first launch-to-launch spread on a
        host comes from these."""
        base, wanted_more = outcome.baseline, self.settings.noise_relaunches
        if base is None or base.status != "ok" or wanted_more <= 0:
            return
        have = len(self.store.launch_samples_of(self.plan.study, base.candidate))
        wanted = wanted_more + 1 - have
        for i in range(max(0, self.budget.how_many_fit(wanted, self._relaunch_s(outcome)))):
            self.reporter.relaunch_started(Relaunch.noise(i + 1, wanted))
            again = self.boxes.launch(self.launch, LaunchRequest(
                decode_only(self.plan.ctx), base.candidate, base.number, Purpose.NOISE,
                log_name=f"noise-{have + i}-trial-{base.number:03d}", events=self.reporter.trial_event))
            if again.objective is not None:
                self.store.add_launch_sample(self.noise, self.plan.study, base.candidate, again.objective, "noise",
                                             base.number, energy=again.energy, boxes=tuple(again.boxes))

    def _draft_schedule(self, outcome: StudyOutcome) -> DraftScheduleReport:
        """The draft length per batch size composed from the trials and confirmed in one launch
        (after the noise relaunches, whose spread judges it), or why none."""
        plan = self.plan
        refused = refusal(plan.space, plan.choices)
        if refused is not None:
            return refused.model_copy(update={"study": plan.study})
        report, anchor = compose(plan.study, outcome.ranked, plan.space.workload.concurrency)
        if report.schedule is None or anchor is None:
            return report
        late = self.budget.refusal(typical_trial_s(outcome.trials), "a launch")
        if late:
            return report.model_copy(update={"why": f"composed from the trials; its launch skipped: {late}"})
        return confirm_schedule(functools.partial(self.boxes.launch, self.launch), plan.ctx, report, anchor,
                                lambda: self.store.launch_noise(self.noise), self.reporter.trial_event)
