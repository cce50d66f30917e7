"""Progress a person can plan with: what a search will run and about how long, before the first
launch (`forecast`), and the ETA as trials finish (requests inside a trial: autotune/trial/requests.py).

Estimating only: printing lives in autotune/output/progress.py. A time estimate says what it is based on: trials
already measured in runs.db (this study, else earlier studies of the same space and engine), or,
when nothing was measured yet, a rough count of the workload's requests at the planner's speed.
"""

from __future__ import annotations

import math
import statistics

from pydantic import BaseModel, ConfigDict

from autotune.engines import get_engine
from autotune.failures.learning import environment_of
from autotune.gates.score import rank
from autotune.hardware.profiles import describe
from autotune.models import GatePolicy, SearchSpace, TrialResult
from autotune.planner.roofline import estimate
from autotune.space.candidates import baseline, enumerate_candidates
from autotune.store import ENVIRONMENT, Store
from autotune.study.outcome import baseline_of, judged_again
from autotune.study.prepared import RunSettings, PreparedStudy
from autotune.study.relaunch_cost import gates_time_s, relaunch_s
from autotune.trial.phases import Phase, Step
from autotune.trial.requests import workload_requests
from autotune.verdict.confirmation import rounds_done


class RunForecast(BaseModel):
    """What `autotune search` is about to run, told before the first launch."""

    model_config = ConfigDict(extra="forbid")

    study: str
    candidates_total: int
    candidates_left: int  # survive pruning (rules, layout, probes, memory) and were not tried yet
    measured: int  # trials of this study already launched (a resumed study)
    trials: int  # launches this run will make, baseline included, at most
    confirm_rounds: int
    trial_s: float | None  # one trial without its gates, estimated
    relaunch_s: float | None = None  # one objective-only relaunch (confirmation, noise), where known
    basis: str  # where trial_s comes from
    gated: int = 0  # launches that run needle and qeval (at most)
    gates_s: float | None = None  # what the gates add to a launch
    relaunches: int = 0  # gates relaunches of the final best (gates at the end)
    noise_relaunches: int = 0  # decode-only relaunches of the baseline beyond the confirmation's
    hardware: str | None = None  # what a node is and whether the figures are this host's (hardware.profiles.describe)
    parallel: int = 1  # trials in flight at once (autotune/study/parallel.py)
    retried: int = 0  # candidates whose trials failed for a cause every candidate shared: launched again
    retried_because: str | None = None  # that cause, as the earlier run ended on it

    @property
    def launches(self) -> int:
        return self.trials + self.relaunches + 2 * self.confirm_rounds + self.noise_relaunches

    @property
    def total_s(self) -> float | None:
        if self.trial_s is None:
            return None
        # a confirmation or noise relaunch measures the objective only: a trial's time bounds it
        # where no relaunch or trial phases price it (autotune/study/relaunch_cost.py)
        relaunch = min(self.relaunch_s or self.trial_s, self.trial_s)
        objective_only = 2 * self.confirm_rounds + self.noise_relaunches
        return (self.trial_s * (self.trials + self.relaunches) + relaunch * objective_only
                + (self.gates_s or 0.0) * self.gated)

    @property
    def wall_s(self) -> float | None:
        """Wall time with `parallel` trials in flight: the trials in waves of `parallel` (their gates
        too), then the gates relaunch, confirmation and noise relaunches one at a time, as they run.
        Each trial is priced as when it runs alone: engines that share a host's cores run slower."""
        if self.trial_s is None or self.total_s is None:
            return None
        if self.parallel <= 1:
            return self.total_s
        waves = math.ceil(self.trials / self.parallel)
        gated_waves = math.ceil(self.gated / self.parallel)
        trials_s = self.trial_s * self.trials + (self.gates_s or 0.0) * self.gated
        return self.total_s - trials_s + self.trial_s * waves + (self.gates_s or 0.0) * gated_waves


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 600:
        return f"{seconds / 60:.1f} min"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def measured_trials(store: Store, study: str, space: SearchSpace) -> tuple[list[TrialResult], str]:
    """Trials whose engine served: this study's, else earlier studies' of the same space and engine."""
    def launched(name: str) -> list[TrialResult]:  # a start that failed in seconds prices nothing
        return [t for t in store.trials(name) if t.status in ("ok", "failed") and t.served and t.duration_s > 1.0]

    own = launched(study)
    if own:
        return own, f"median of {len(own)} trials of this study"
    others: list[TrialResult] = []
    for row in store.studies():
        if row["name"] != study and row["space_name"] == space.name and row["engine"] == space.engine:
            others += launched(row["name"])
    if others:
        return others, f"median of {len(others)} earlier trials of space {space.name} in runs.db"
    return [], ""


def workload_guess_s(space: SearchSpace, accuracy: bool, decode_tps: float | None, prefill_tps: float | None) -> float:
    """A rough upper guess of one trial: startup + every request's output at full length, and
    every prompt token at the prefill rate (the baseline's context; the study's needle test)."""
    from autotune.space.candidates import context_tokens, needle_lengths

    work = space.workload
    ctx = context_tokens(space, baseline(space))
    phases = workload_requests(space, ctx)
    # a capacity search's requests at one stream's speed: exact on a server that queues them, an
    # upper bound where the engine batches them
    decode_requests = sum(n for step, n in phases.items() if step.phase in (Phase.DECODE, Phase.CAPACITY))
    out_tokens = decode_requests * work.decode_max_tokens + phases.get(Step.of(Phase.WARM_UP), 0) * 16
    in_tokens = work.prefill_repeats * sum(work.prefill_tokens)
    if accuracy and space.gates.qeval:
        from autotune.bench.qeval import request_tokens_guess

        prompt, answers = request_tokens_guess(space.gates.qeval, space.model.prompt_style)
        out_tokens += answers // 2  # most answers stop well inside their budget
        in_tokens += prompt
    if accuracy and space.gates.needle:
        out_tokens += phases.get(Step.of(Phase.NEEDLE), 0) * space.gates.needle.max_tokens
        in_tokens += len(set(space.gates.needle.depths)) * sum(needle_lengths(space))
    tps = decode_tps or 20.0
    pps = prefill_tps or 200.0
    return get_engine(space.engine).startup_guess_s + out_tokens / tps + in_tokens / pps


def relaunch_guess_s(space: SearchSpace, decode_tps: float | None, prefill_tps: float | None) -> float:
    """A rough guess of one objective-only relaunch (confirmation, noise) before any is measured: the
    start and the objective's own requests (its decode passes, its waves), no prefill or gates."""
    waves = space.objective.waves
    decode = {"prompt_sets": []} if space.objective.capacity else {}
    work = space.workload.model_copy(update={"prefill_tokens": [], "decode_context_tokens": [],
                                             "concurrency": [1, *waves], **decode})
    return workload_guess_s(space.model_copy(update={"workload": work}), False, decode_tps, prefill_tps)


def eta_s(durations: list[float], trials_left: int, confirm_launches: int, current_s: float = 0.0) -> float | None:
    """Median trial time x launches left (the running one counts, less its elapsed time)."""
    if not durations:
        return None
    typical = statistics.median(durations)
    running = max(0.0, typical - current_s) if trials_left > 0 else 0.0
    return running + typical * (max(0, trials_left - 1) + confirm_launches)


def forecast(plan: PreparedStudy, settings: RunSettings) -> RunForecast:
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
    to_run = max(0, min(settings.trials - measured, len(left)))
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
    confirm_rounds = settings.confirm_rounds
    if store is not None and to_run == 0 and confirm_rounds > 0:  # a resume runs only the missing rounds
        judged = judged_again(store, plan.study, own)
        ranked, base = rank(judged), baseline_of(judged)
        if ranked and base is not None:
            done = rounds_done(store.confirmation_launches(plan.study, ranked[0].number, base.number))
            confirm_rounds = max(0, confirm_rounds - done)
    return RunForecast(
        study=plan.study,
        candidates_total=plan.candidates_total,
        candidates_left=len(left),
        measured=measured,
        trials=to_run,
        confirm_rounds=confirm_rounds,
        trial_s=trial_s,
        relaunch_s=(relaunch_s(own, plan.space.objective, store.relaunch_seconds(plan.study)) if store else None)
        or relaunch_guess_s(plan.space, guess.decode_tps, guess.prefill_tps),
        basis=basis,
        gated=gated,
        gates_s=gates_s,
        relaunches=relaunches,
        # the confirmation's rounds relaunch the baseline too (the run's noise relaunches top up)
        noise_relaunches=max(0, settings.noise_relaunches - confirm_rounds),
        hardware=describe(plan.hardware),
        parallel=plan.parallel,
        retried=len(retried),
        retried_because=cause.describe() if retried and (cause := environment_of(own)) else None,
    )
