"""`autotune search`: run a prepared plan's study to its answer, owning the study (study/lock.py)
for as long as it launches anything: the baseline's noise relaunches, the Tuner, the confirmation
rounds; and the forecast printed before the first launch."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator

from autotune.commands.setup import predicted_order
from autotune.errors import AutotuneError, ConfigError, EnvironmentFailed
from autotune.failures.learning import environment_of
from autotune.hardware.profiles import describe
from autotune.models import (
    ConfirmationLaunch,
    GatePolicy,
    TrialResult,
)
from autotune.planner.roofline import estimate
from autotune.space.candidates import (
    baseline,
    enumerate_candidates,
)
from autotune.space.fingerprint import check_same_experiment
from autotune.space.fingerprint import fingerprint as space_fingerprint
from autotune.study.confirm import confirm, relaunch
from autotune.study.draft_schedule import schedule_study
from autotune.study.forecast import RunForecast, gates_time_s, measured_trials, workload_guess_s
from autotune.study.leases import BoxPool
from autotune.study.lock import StudyLock, StudyOwner
from autotune.study.parallel import on_boxes
from autotune.study.plan import SearchPlan
from autotune.study.relaunch_cost import relaunch_s
from autotune.study.relaunches import Relaunch
from autotune.store import ENVIRONMENT
from autotune.study.tuner import Reporter, StudyOutcome, TimeBudget, Tuner, outcome_of
from autotune.trial.launch import Launch, Purpose
from autotune.trial.run import EngineLaunch
from autotune.verdict.confirmation import rounds_done
from autotune.verdict.noise import LaunchNoise


def relaunch_baseline_for_noise(
    launch: Launch, plan: SearchPlan, outcome: StudyOutcome, host_key: str, launches: int, budget: TimeBudget,
    events: Callable[[str], None], announce: Callable[[Relaunch], None], pool: BoxPool | None = None,
) -> int:
    """Relaunch the baseline (decode only) until it has `launches` + 1 launches in this study, its
    confirmation rounds' launches counted: the first launch-to-launch spread on a host comes from
    these. Returns the relaunches made."""
    assert plan.store is not None
    base = outcome.baseline
    if base is None or base.status != "ok" or launches <= 0:
        return 0
    have = len(plan.store.launch_samples_of(plan.study, base.candidate))
    wanted = launches + 1 - have
    made = 0
    for i in range(max(0, budget.how_many_fit(wanted, relaunch_s(outcome.trials, plan.space.objective,
                                                                   plan.store.relaunch_seconds(plan.study))))):
        announce(Relaunch.noise(i + 1, wanted))
        with on_boxes(pool, plan.nodes, plan.ctx, plan.pool_cluster) as (ctx, boxes):
            again = relaunch(launch, Purpose.NOISE, ctx, base, f"noise-{have + i}-trial-{base.number:03d}", events)
        if again.objective is not None:
            plan.store.add_launch_sample(host_key, plan.space.engine, plan.study, base.candidate, again.objective, "noise",
                                         base.number, metric=plan.space.objective.sample_metric, energy=again.energy,
                                         boxes=boxes)
        made += 1
    return made


def run(
    plan: SearchPlan,
    *,
    trials: int,
    seed: int = 0,
    confirm_rounds: int = 0,
    noise_relaunches: int = 1,
    qeval_reference: int | None = None,
    time_budget_s: float | None = None,
    reporter: Reporter | None = None,
    wait_s: float | None = None,
    on_wait: Callable[[StudyOwner], None] | None = None,
    on_owned: Callable[[], None] | None = None,
    launch: Launch = EngineLaunch(),
    clock: Callable[[], float] = time.monotonic,
) -> StudyOutcome:
    """Run the study, owning it for the whole run: another process on the same study is refused
    (StudyBusy) or, with `wait_s`, waits that long for it. Every engine start goes through `launch`;
    the time budget reads `clock`."""
    assert plan.store is not None
    with StudyLock(plan.store, plan.study, wait_s=wait_s, on_wait=on_wait):
        if on_owned is not None:  # e.g. the forecast: printed once this process owns the study
            on_owned()
        return _run_owned(
            launch, plan, trials, seed, confirm_rounds, noise_relaunches, qeval_reference,
            TimeBudget(time_budget_s, clock), reporter,
        )


def _run_owned(
    launch: Launch,
    plan: SearchPlan,
    trials: int,
    seed: int,
    confirm_rounds: int,
    noise_relaunches: int,
    qeval_reference: int | None,
    budget: TimeBudget,
    reporter: Reporter | None,
) -> StudyOutcome:
    assert plan.store is not None
    stored = plan.store.study_space(plan.study)
    if stored is not None:  # again under the lock: another process may have created it meanwhile
        check_same_experiment(plan.study, stored, plan.space)
    host_key = plan.store.save_host(plan.host)
    plan.store.save_study(
        plan.study, plan.space, plan.hardware.name, plan.nodes, host_key, space_fingerprint(plan.space),
        accuracy=plan.ctx.gates.accuracy,
    )
    if qeval_reference is not None:
        plan.store.set_study_reference(plan.study, qeval_reference)
    with pool_of(plan) as pool:
        return _run_on_pool(launch, plan, pool, host_key, budget, trials, seed, confirm_rounds, noise_relaunches,
                            reporter)


@contextlib.contextmanager
def pool_of(plan: SearchPlan) -> Iterator[BoxPool | None]:
    """The study's box pool for as long as it launches (None: the boxes of one launch, which every
    trial takes in turn: no leases, as always)."""
    if plan.boxes <= plan.nodes:
        yield None
        return
    with BoxPool.local(plan.boxes) as pool:
        yield pool


def _run_on_pool(
    launch: Launch, plan: SearchPlan, pool: BoxPool | None, host_key: str, budget: TimeBudget, trials: int, seed: int,
    confirm_rounds: int, noise_relaunches: int, reporter: Reporter | None,
) -> StudyOutcome:
    assert plan.store is not None
    tuner = Tuner(
        plan.ctx,
        plan.store,
        plan.pruner,
        host_key,
        trials=trials,
        seed=seed,
        order=predicted_order(plan),
        first=plan.first,
        predict=lambda c: estimate(plan.space, c, plan.hardware, plan.nodes).predicted(),
        reporter=reporter,
        budget=budget,
        pool=pool,
        parallel=plan.parallel,
        per_trial=plan.nodes,
        boxes=plan.pool_cluster,
        launch=launch,
    )
    result = tuner.run()
    events = reporter.trial_event if reporter else (lambda _: None)
    announce = reporter.relaunch_started if reporter else (lambda _: None)
    result = _confirm(launch, plan, result, host_key, confirm_rounds, budget, events, announce, pool)
    # after the confirmation: its rounds relaunched the baseline, and those launches count
    if relaunch_baseline_for_noise(launch, plan, result, host_key, noise_relaunches, budget, events, announce, pool):
        result = outcome_of(plan.store, plan.study, result.exhausted, result.stopped)
    return _draft_schedule(launch, plan, result, host_key, budget, events, pool)


def _draft_schedule(
    launch: Launch, plan: SearchPlan, result: StudyOutcome, host_key: str, budget: TimeBudget, events: Callable[[str], None],
    pool: BoxPool | None,
) -> StudyOutcome:
    """The draft length per batch size composed from the trials and confirmed in one launch (after
    the noise relaunches, whose spread judges it), or why none; stored either way."""
    assert plan.store is not None
    store = plan.store
    objective = plan.space.objective

    def noise() -> LaunchNoise | None:
        return store.launch_noise(host_key, plan.space.engine, objective.sample_metric)

    store.save_draft_schedule(schedule_study(launch, plan, result, noise, budget, events, pool))
    return outcome_of(store, plan.study, result.exhausted, result.stopped)


def _confirm(
    launch: Launch, plan: SearchPlan, result: StudyOutcome, host_key: str, confirm_rounds: int, budget: TimeBudget,
    events: Callable[[str], None], announce: Callable[[Relaunch], None], pool: BoxPool | None = None,
) -> StudyOutcome:
    """The best trial against the baseline in interleaved relaunches (autotune/study/confirm.py): the rounds
    of this pair that earlier sittings ran count, and only the missing ones are run. With a box pool
    both arms run on the same leased boxes, so a faster box cannot pass for a better config."""
    assert plan.store is not None
    store = plan.store
    best, base = result.best, result.baseline
    if confirm_rounds <= 0 or best is None or base is None or base.status != "ok" or best.number == base.number:
        return result
    earlier = store.confirmation_launches(plan.study, best.number, base.number)
    failed_before = any(x.objective is None for x in earlier)  # that pair's verdict stays "no winner"
    missing = 0 if failed_before else max(0, confirm_rounds - rounds_done(earlier))
    each = relaunch_s(result.trials, plan.space.objective, store.relaunch_seconds(plan.study))
    round_s = 2 * each if each else None
    rounds = budget.how_many_fit(missing, round_s)
    if rounds == 0 and not earlier:
        if missing == 0:
            return result
        return result.model_copy(
            update={"stopped": f"confirmation skipped: {budget.refusal(round_s, 'a confirmation round')}"}
        )

    held: list[tuple[int, ...]] = [()]  # the boxes of the confirmation's lease

    def keep(arm: TrialResult, round_: int, again: TrialResult, seconds: float) -> ConfirmationLaunch:
        sample = None
        value = again.objective
        if value is not None:
            sample = store.add_launch_sample(host_key, plan.space.engine, plan.study, arm.candidate, value, "confirm",
                                             arm.number, metric=plan.space.objective.sample_metric, energy=again.energy,
                                             boxes=held[0])
        return store.add_confirmation_launch(ConfirmationLaunch(
            id=0, study=plan.study, best_trial=best.number, baseline_trial=base.number, round=round_, trial=arm.number,
            objective=value, duration_s=round(seconds, 3), sample_id=sample,
        ))

    # the verdict pools its own launches with the host's noise: the prior must not hold them again
    own = frozenset(x.sample_id for x in earlier if x.sample_id is not None)
    prior = store.launch_noise(host_key, plan.space.engine, plan.space.objective.sample_metric, exclude=own)
    with on_boxes(pool if rounds else None, plan.nodes, plan.ctx, plan.pool_cluster) as (ctx, boxes):
        held[0] = boxes
        store.save_confirmation(confirm(launch, ctx, best, base, rounds, keep, events, announce, prior, earlier,
                                        total=confirm_rounds, clock=budget.clock,
                                        slowed=lambda: store.slowed_samples(host_key, plan.space.engine)))
    cut = None
    if rounds < missing:
        cut = (f"confirmation: {rounds_done(earlier) + rounds} of {confirm_rounds} rounds so far, the time budget left "
               f"{missing - rounds} for a resume ({budget.refusal(round_s, 'a confirmation round')})")
    return outcome_of(store, plan.study, result.exhausted, result.stopped or cut)


def forecast(
    plan: SearchPlan, trials: int, confirm_rounds: int, noise_relaunches: int = 0,
) -> RunForecast:
    """What a run will do before its first launch: candidates left, trials, confirmation, time.
    A launch's time is priced without its gates, and the gates where they run: with gates at the
    end the qeval reference's trial and one relaunch of the final best, else every trial (at most)."""
    store = plan.store
    own = store.trials(plan.study) if store else []
    # a candidate whose trials all failed for a cause every candidate shared is tried again
    retried = {t.candidate.key() for t in own if t.status == ENVIRONMENT}
    tried = {t.candidate.key() for t in own if t.status != ENVIRONMENT}
    retried -= tried
    left = [c for c in enumerate_candidates(plan.space) if plan.pruner.reason(c) is None and c.key() not in tried]
    measured = len([t for t in own if t.status in ("ok", "failed")])
    to_run = max(0, min(trials - measured, len(left)))
    launched, basis = measured_trials(store, plan.study, plan.space) if store else ([], "")
    gate_runs = [gates_time_s(t) for t in launched if gates_time_s(t) > 0]
    guess = estimate(plan.space, baseline(plan.space), plan.hardware, plan.nodes)
    plain = workload_guess_s(plan.space, False, guess.decode_tps, guess.prefill_tps)
    if launched:
        trial_s: float | None = statistics.median(t.duration_s - gates_time_s(t) for t in launched)
    else:
        trial_s = plain
        basis = (
            "rough guess, nothing measured here yet: the workload's requests at the planner's "
            f"{guess.decode_tps or 20:.0f} tok/s plus a ~{plan.engine.startup_guess_s:.0f} s start"
        )
    gates = plan.ctx.gates.accuracy and (plan.space.gates.needle is not None or plan.space.gates.qeval is not None)
    gated = relaunches = 0
    gates_s: float | None = None
    if gates:
        gates_s = statistics.median(gate_runs) if gate_runs else (
            workload_guess_s(plan.space, True, guess.decode_tps, guess.prefill_tps) - plain
        )
        if plan.ctx.gates is GatePolicy.AT_END:
            reference_gated = any(gates_time_s(t) > 0 or t.needle or t.qeval for t in own)
            relaunches = 1
            gated = (0 if reference_gated or to_run == 0 else 1) + relaunches
        else:
            gated = to_run
    if store is not None and to_run == 0 and confirm_rounds > 0:  # a resume runs only the missing rounds
        now = outcome_of(store, plan.study)
        if now.best is not None and now.baseline is not None:
            done = rounds_done(store.confirmation_launches(plan.study, now.best.number, now.baseline.number))
            confirm_rounds = max(0, confirm_rounds - done)
    return RunForecast(
        study=plan.study,
        candidates_total=plan.candidates_total,
        candidates_left=len(left),
        measured=measured,
        trials=to_run,
        confirm_rounds=confirm_rounds,
        trial_s=trial_s,
        relaunch_s=relaunch_s(own, plan.space.objective, store.relaunch_seconds(plan.study)) if store else None,
        basis=basis,
        gated=gated,
        gates_s=gates_s,
        relaunches=relaunches,
        # the confirmation's rounds relaunch the baseline too (relaunch_baseline_for_noise tops up)
        noise_relaunches=max(0, noise_relaunches - confirm_rounds),
        hardware=describe(plan.hardware),
        parallel=plan.parallel,
        retried=len(retried),
        retried_because=cause.describe() if retried and (cause := environment_of(own)) else None,
    )


def no_answer(outcome: StudyOutcome) -> AutotuneError | None:
    """Why the study gave no answer at all, as the error to exit with; None when it ran (a study
    whose trials were measured but found no winner has an answer: that verdict). Exit 3 when every
    candidate failed for a cause no knob explains, or no launch got its engine to serve; exit 2 when
    no trial ran because of the study's own settings (its time budget, a configuration it refuses)."""
    if outcome.environment is not None:
        return EnvironmentFailed(f"no answer: {outcome.environment.describe()}")
    launched = [t for t in outcome.trials if t.status != "skipped"]
    if not launched:
        return ConfigError(f"no trial ran: {outcome.stopped}") if outcome.stopped else None
    if any(t.served for t in launched):
        return None
    failed = [t for t in launched if t.failure is not None]
    first = failed[0] if failed else launched[0]
    why = first.failure.message if first.failure else (first.reason or first.status)
    if failed and all(t.failure.failure_class == "configuration_error" for t in failed):
        return ConfigError(f"no answer: no trial could run with the study's settings (trial {first.number}: {why})")
    return EnvironmentFailed(
        f"no answer: no launch got its engine to serve ({len(launched)} launched; trial {first.number}: {why}); "
        "`autotune show` lists each failure, `autotune probe --classify LOG` reads a log")
