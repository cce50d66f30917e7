"""A study's trials, through Optuna: baseline first, sample, prune before launching, launch, judge,
learn, and the gates deferred to the end of the trials (what a trial runs of its gates and what an
accuracy failure teaches: autotune/study/accuracy.py); the run around the trials (confirmation,
noise relaunches, draft schedule) is autotune/study/run.py's.

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

import contextlib
import math
import os
import random
import socket
import time
from collections import Counter
from collections.abc import Callable

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from autotune.errors import NoValidCandidate
from autotune.failures.learning import as_environment, environment_failed, environment_of, learn_from_failure, shared_failure
from autotune.gates.numerics import knob_values
from autotune.gates.score import constraint_values, rank
from autotune.models import Candidate, EnvironmentFailure, GatePolicy, TrialResult
from autotune.space.candidates import Pruner, baseline, enumerate_candidates, make_candidate
from autotune.store import ATTEMPTS_BEFORE_FAILURE, CUT_STATUSES, ENVIRONMENT, Store, attempt_boxes
from autotune.study.accuracy import StudyAccuracy
from autotune.study.budget import TimeBudget, typical_trial_s
from autotune.study.deferred import REFERENCE_NEEDLE, reference_context
from autotune.study.outcome import StudyOutcome, outcome_of
from autotune.study.parallel import Boxes, Flight, Launches, in_flight_text
from autotune.study.prepared import queued_first
from autotune.study.relaunch_cost import gates_relaunch_s
from autotune.study.reporter import Reporter, SilentReporter
from autotune.study.view import StudyTrials
from autotune.trial.context import TrialContext
from autotune.trial.launch import Launch, LaunchRequest
from autotune.verdict.noise import NoiseKey

MAX_IDLE_ASKS = 25
STATUS_ATTR = "autotune_status"  # Optuna user attribute naming an attempt's autotune status


def distributions(ctx: TrialContext) -> dict[str, CategoricalDistribution]:
    return {k.name: CategoricalDistribution(k.values) for k in ctx.space.knobs}


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
    """Runs one study to `trials` launched trials (resuming what runs.db already holds), every one
    through `launch` on `boxes`, then the gates deferred to their end; `run` returns the outcome,
    judged."""

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
        launch: Launch,
        learn_accuracy_classes: bool = True,
        boxes: Boxes = Boxes(),
        parallel: int = 1,
    ) -> None:
        self.ctx = ctx
        # several trials in flight (autotune.study.parallel), each on boxes of its own (autotune.study.leases)
        self.boxes = boxes
        self.parallel = parallel
        self.store = store
        self.view = StudyTrials(store, ctx.study)  # read once: decisions read it, saves write through
        self.host_key = host_key
        self.noise = NoiseKey(host=host_key, engine=ctx.space.engine, metric=ctx.space.objective.sample_metric)
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
        self.accuracy = StudyAccuracy(ctx, store, self.view, self.noise, launch=launch, boxes=boxes,
                                      reporter=self.reporter, budget=self.budget, untried=self._untried_feasible,
                                      learn_classes=learn_accuracy_classes)
        # the given checks and this study's learned ones; the caller's pruner is left as it was
        self.pruner = Pruner([*pruner.checks, self._learned_failure, self.accuracy.failed_class])

    def _learned_failure(self, candidate: Candidate) -> str | None:
        for failure in self.failures:
            if failure.matches(candidate):
                where = f" in trial {failure.trial}" if failure.trial is not None else ""
                return f"learned: {failure.label()} failed with {failure.failure_class}{where}"
        return None

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

    def _enqueue(self, study: optuna.Study, candidate: Candidate) -> None:
        study.enqueue_trial(knob_values(self.ctx.space, candidate), skip_if_exists=False)

    def _enqueue_missing(self, study: optuna.Study, candidates: list[Candidate]) -> None:
        """On resume: queue the requested first candidates that were neither measured nor queued."""
        queued = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
        waiting = [t.system_attrs.get("fixed_params", t.params) for t in queued]
        for candidate in candidates:
            measured = self.view.by_candidate(candidate) is not None
            if not measured and knob_values(self.ctx.space, candidate) not in waiting:
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
        launches = Launches(self.parallel, self.boxes.pool)
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
            stopped = self.accuracy.gate_the_head(priced) or stopped
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
        lease = self.boxes.lease()
        ctx = self.boxes.on(self.ctx, lease)
        flight = Flight(trial=trial, candidate=candidate, ctx=ctx, boxes=lease.boxes if lease else (),
                        wait_needle=self.accuracy.reference_needle_waits(trial.number))

        def events(text: str) -> None:
            flight.stage = f"at: {text}"
            self.reporter.trial_event(text)

        donor = self.accuracy.donor(candidate, trial.number)
        # reusing costs nothing, and a class not gated yet is gated at once: no deferral
        defer = donor is None and not self.accuracy.gate_class_now(candidate)
        check = self.accuracy.dominated_check(trial.number, defer=defer)
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
        predicted = self.predict(candidate) if self.predict else {}
        if flight.wait_needle and result.status == "ok":
            result = result.model_copy(update={"deferred": REFERENCE_NEEDLE})
        gates = self.accuracy.gates(result, [*before, result])
        result = result.model_copy(update={"gates": gates, "predicted": predicted, "boxes": list(flight.boxes)})
        self.view.save(result)
        self.accuracy.learn(result)
        if result.status == "ok" and result.objective:
            self.store.add_launch_sample(self.noise, self.ctx.study, candidate, result.objective, "trial",
                                         trial.number, energy=result.energy, boxes=flight.boxes)
        # isolating a failure no signature pins on knobs launches the engine: on boxes of its own;
        # a failure the baseline shares teaches no knob value (the study stops on it instead)
        shared = result.status == "failed" and any(
            t.number == result.number for t in shared_failure([*before, result], baseline(space)))
        isolates = result.failure is not None and not result.failure.implicates and not shared
        with self.boxes.leased(flight.ctx) if isolates else contextlib.nullcontext((flight.ctx, ())) as (ctx, _):
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
