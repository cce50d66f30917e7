"""What `autotune search`, `show`, `export` and `plan` do, as library calls (the CLI only prints).

`prepare` checks everything that can be wrong with the input before runs.db is opened, so a bad
space, engine, model path or hardware choice leaves the database untouched: knob values against
the engine's own options, the launcher against the cluster file, the launcher's libraries, the
cluster's daemons; then, reading runs.db only, that a resumed study keeps the space it was made
from. `run` owns the study (study_lock) for as long as it launches anything.
"""

from __future__ import annotations

import math
import os
import socket
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from autotune.confirm import confirm, relaunch, rounds_done
from autotune.device import detect, host_fingerprint
from autotune.engines import Engine, get_engine
from autotune.errors import ConfigError, ModelNotFound, NoValidCandidate
from autotune.hardware import GIB_IN_GB, is_this_host, parallel_layout, resolve_hardware
from autotune.launchers import launcher_class
from autotune.launchers.base import free_port
from autotune.launchers.cluster import first_nodes, load_cluster, local_cluster, placeholder_cluster, placeholder_note
from autotune.launchers.preflight import check_launch
from autotune.launchers.watchdog import limits_for
from autotune.model_files import resolve_model
from autotune.model_shapes import dummy_weights
from autotune.models import (
    Candidate,
    Cluster,
    ConfirmationLaunch,
    DeviceIdentity,
    HardwareProfile,
    HostFingerprint,
    LaunchSpec,
    PlanEstimate,
    RecipeVerdict,
    SearchSpace,
    TrialResult,
)
from autotune.planner import PlanReport, dropped_estimate, estimate, fits_check
from autotune.planner import plan as plan_candidates
from autotune.progress import RunForecast, gates_time_s, measured_trials, workload_guess_s
from autotune.recipe import portable_launch, recipe_from_plan, recipe_from_trial, render_recipe
from autotune.relaunch_cost import relaunch_s
from autotune.score import accuracy_status
from autotune.space import (
    Check,
    Pruner,
    baseline,
    count_candidates,
    enumerate_candidates,
    load_space,
    make_candidate,
    needle_check,
    probes_check,
    rules_check,
)
from autotune.space_fingerprint import check_same_experiment
from autotune.space_fingerprint import fingerprint as space_fingerprint
from autotune.store import Store, check_writable
from autotune.study import Reporter, StudyOutcome, TimeBudget, Tuner, outcome_of
from autotune.study_lock import StudyLock, StudyOwner
from autotune.trial import TrialContext


class SearchPlan(BaseModel):
    """A checked search, ready to run: nothing has been launched or written yet."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    space: SearchSpace
    engine: Engine
    hardware: HardwareProfile
    nodes: int
    study: str
    host: HostFingerprint
    db_path: Path
    store: Store | None
    pruner: Pruner
    ctx: TrialContext
    candidates_total: int
    candidates_after_rules: int
    first: list[Candidate] = []


def open_store(db_path: Path, must_exist: bool = False) -> Store:
    return Store(db_path, must_exist=must_exist)


def node_profile(name: str, device: DeviceIdentity | None, cluster_file: Path | None) -> HardwareProfile:
    """The hardware of one node. With a cluster file a node is what the file calls one: its
    gpus_per_node wins over the profile's (two raylets of one GPU each on a two-GPU host)."""
    profile = resolve_hardware(name, device)
    if cluster_file is None:
        return profile
    return profile.model_copy(update={"gpus_per_node": load_cluster(cluster_file).gpus_per_node})


def layout_check(space: SearchSpace, hardware: HardwareProfile, nodes: int) -> Check:
    def check(candidate: Candidate) -> str | None:
        try:
            parallel_layout(space, candidate, hardware, nodes)
        except ConfigError as exc:
            return f"layout: {exc}"
        return None

    return check


def with_cluster_parallelism(space: SearchSpace, engine: Engine, hardware: HardwareProfile, nodes: int) -> SearchSpace:
    """On several nodes a space that leaves TP/PP unset runs tensor parallel over every GPU."""
    named = {k.name for k in space.knobs} | set(space.fixed)
    if nodes == 1 or named & {"tensor_parallel_size", "pipeline_parallel_size"}:
        return space
    if "tensor_parallel_size" not in engine.knobs:
        raise ConfigError(f"engine {engine.name!r} cannot run on {nodes} nodes (no tensor parallelism)")
    fixed = {**space.fixed, "tensor_parallel_size": nodes * max(hardware.gpus_per_node, 1)}
    return space.model_copy(update={"fixed": fixed})


def launchable(
    space: SearchSpace, engine: Engine, hardware: HardwareProfile, nodes: int
) -> tuple[SearchSpace, Check, Check, list[Candidate]]:
    """The space as it runs on `nodes` boxes, its rule and layout checks, and the candidates both
    allow; a clear error when none is left (the first layout problem, else the rules)."""
    space = with_cluster_parallelism(space, engine, hardware, nodes)
    rules, layout = rules_check(space), layout_check(space, hardware, nodes)
    allowed = [c for c in enumerate_candidates(space) if rules(c) is None]
    kept = [c for c in allowed if layout(c) is None]
    if not kept:
        if allowed:
            raise ConfigError((layout(allowed[0]) or "").removeprefix("layout: "))
        raise NoValidCandidate(
            f"space {space.name!r}: the rules rule out all {count_candidates(space)} candidates"
        )
    return space, rules, layout, kept


def cluster_for(
    cluster_file: Path | None,
    nodes: int,
    launcher: str,
    hardware: HardwareProfile,
    device: DeviceIdentity,
    image: str | None,
    dry_run: bool = False,
) -> Cluster | None:
    """The boxes to launch on: the cluster file, or (several nodes, no file) Ray nodes on this host
    standing in for boxes when this host has the GPUs for all of them. A dry run launches nothing,
    so without the file or the GPUs it renders for placeholder boxes (`placeholder_cluster`)."""
    chosen = launcher_class(launcher)  # an unknown name is refused here, before anything is read
    if cluster_file is not None:
        cluster = first_nodes(load_cluster(cluster_file), nodes, cluster_file)
        return cluster.model_copy(update={"image": cluster.image or image})
    if chosen.needs_cluster_file and not dry_run:
        raise ConfigError(f"the {launcher} launcher needs --cluster FILE ({chosen.needs_cluster_file})")
    if nodes == 1:
        return None
    needed = nodes * hardware.gpus_per_node
    if dry_run and needed > len(device.gpus):
        return placeholder_cluster(nodes, hardware.gpus_per_node).model_copy(update={"image": image})
    if needed > len(device.gpus):
        raise ConfigError(
            f"--nodes {nodes} on {hardware.name} needs {needed} GPUs; this host has {len(device.gpus)}: "
            "describe the boxes in a cluster file and pass --cluster FILE"
        )
    temp_root = Path(tempfile.gettempdir()) / f"at-ray-{os.getpid()}"
    return local_cluster(nodes, temp_root, gpus_per_node=hardware.gpus_per_node)


def prepare(
    *,
    space_name: str,
    model_path: str | None,
    db_path: Path,
    study: str | None,
    hardware: str | None,
    nodes: int | None,
    accuracy: bool,
    logs_dir: Path,
    dry_run: bool = False,
    tries: list[str] | None = None,
    cluster_file: Path | None = None,
    launcher: str | None = None,
) -> SearchPlan:
    space = load_space(space_name)
    first = parse_tries(space, tries or [])
    engine = get_engine(space.engine).use_space(space)
    if not dry_run:
        engine.check_available()
        engine.preflight(space)
    try:
        model = resolve_model(space.model, model_path)
    except ModelNotFound:
        if not dry_run:
            raise
        model = space.model.model_copy(update={"path": model_path or space.model.path or space.model.name})
    device = detect()
    profile = node_profile(hardware or space.hardware, device, cluster_file)
    node_count = nodes or space.nodes
    space, rules, layout, kept = launchable(space.model_copy(update={"model": model}), engine, profile, node_count)
    launcher_name = launcher or space.launcher
    cluster = cluster_for(cluster_file, node_count, launcher_name, profile, device, space.image, dry_run)
    check_launch(launcher_name, cluster, cluster_file=cluster_file, reach=not dry_run)
    host = host_fingerprint(device, engine)
    if dry_run:
        store = Store(db_path) if db_path.exists() else None
    else:
        check_writable(db_path)
        store = Store(db_path)
    name = study or f"{space.name}-{profile.name}-x{node_count}"
    stored = store.study_space(name) if store else None
    if stored is not None:
        check_same_experiment(name, stored, space)
    probes = store.probe_results(host.key()) if store else []
    pruner = Pruner(
        [rules, layout, needle_check(space, accuracy), probes_check(probes), fits_check(space, profile, node_count)]
    )
    ctx = TrialContext(
        study=name,
        space=space,
        model=model,
        engine=engine,
        logs_dir=logs_dir,
        accuracy=accuracy,
        launcher=launcher_name,
        cluster=cluster,
        watchdog=limits_for(profile, device.memory_total_gb * GIB_IN_GB),
    )
    return SearchPlan(
        space=space,
        engine=engine,
        hardware=profile,
        nodes=node_count,
        study=name,
        host=host,
        db_path=db_path,
        store=store,
        pruner=pruner,
        ctx=ctx,
        candidates_total=count_candidates(space),
        candidates_after_rules=len(kept),
        first=first,
    )


def surviving(plan: SearchPlan) -> list[tuple[Candidate, str | None]]:
    """Every candidate with the reason it is pruned (None = it would be launched)."""
    return [(c, plan.pruner.reason(c)) for c in enumerate_candidates(plan.space)]


#: predictions closer than this (relative) are ties: below what the roofline planner can tell apart
PLANNER_TIE = 0.05


def planner_order(space: SearchSpace, hardware: HardwareProfile, nodes: int) -> Callable[[list[Candidate]], list[Candidate]]:
    """The planner's prior for the first trials: candidates by predicted decode tok/s, best first.
    Predictions within PLANNER_TIE of each other are ties (bands of that width down from the best),
    and among ties the candidate that changes fewer knobs from the baseline comes first: the
    planner's gain is the same, and each extra untested change is one more way to fail."""
    base = baseline(space)

    def changes(candidate: Candidate) -> int:
        return sum(1 for k in space.knobs if candidate.params.get(k.name, candidate.env.get(k.name))
                   != base.params.get(k.name, base.env.get(k.name)))

    def order(candidates: list[Candidate]) -> list[Candidate]:
        scored = [(estimate(space, c, hardware, nodes).decode_tps or 0.0, c) for c in candidates]
        top = max((tps for tps, _ in scored), default=0.0)

        def band(tps: float) -> int:
            return int(math.log(top / tps) / math.log(1 + PLANNER_TIE)) if tps > 0 and top > 0 else 10**6

        return [c for _, c in sorted(scored, key=lambda x: (band(x[0]), changes(x[1])))]

    return order


def predicted_order(plan: SearchPlan) -> Callable[[list[Candidate]], list[Candidate]]:
    return planner_order(plan.space, plan.hardware, plan.nodes)


def parse_tries(space: SearchSpace, tries: list[str]) -> list[Candidate]:
    """`--try kv_cache_dtype=fp8,draft_k=4` -> the candidate with those knob values (others at default)."""
    knobs = {k.name: k for k in space.knobs}
    out = []
    for text in tries:
        tuned = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, sep, raw = part.partition("=")
            if not sep or name not in knobs:
                raise ConfigError(f"--try {text!r}: {part!r} is not KNOB=VALUE for a knob of {space.name!r}")
            matches = [v for v in knobs[name].values if str(v).lower() == raw.lower() or (v is None and raw in ("null", "none", "auto"))]
            if not matches:
                allowed = ", ".join(map(str, knobs[name].values))
                raise ConfigError(f"--try {text!r}: {name} has no value {raw!r}; values: {allowed}")
            tuned[name] = matches[0]
        out.append(make_candidate(space, {**space.baseline_params(), **tuned}))
    return out


def relaunch_baseline_for_noise(
    plan: SearchPlan, outcome: StudyOutcome, host_key: str, launches: int, budget: TimeBudget,
    events: Callable[[str], None],
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
        events(f"noise relaunch {i + 1}/{wanted}: baseline")
        value = relaunch(plan.ctx, base, f"noise-{have + i}-trial-{base.number:03d}", free_port(), events)
        if value is not None:
            plan.store.add_launch_sample(host_key, plan.space.engine, plan.study, base.candidate, value, "noise", base.number,
                                         metric=plan.space.objective.metric)
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
    skip_dominated: bool = True,
    gates_at_end: bool | None = None,
) -> StudyOutcome:
    """Run the study, owning it for the whole run: another process on the same study is refused
    (StudyBusy) or, with `wait_s`, waits that long for it."""
    assert plan.store is not None
    with StudyLock(plan.store, plan.study, wait_s=wait_s, on_wait=on_wait):
        if on_owned is not None:  # e.g. the forecast: printed once this process owns the study
            on_owned()
        return _run_owned(
            plan, trials, seed, confirm_rounds, noise_relaunches, qeval_reference, time_budget_s, reporter, skip_dominated,
            plan.ctx.engine.gates_at_end if gates_at_end is None else gates_at_end,
        )


def _run_owned(
    plan: SearchPlan,
    trials: int,
    seed: int,
    confirm_rounds: int,
    noise_relaunches: int,
    qeval_reference: int | None,
    time_budget_s: float | None,
    reporter: Reporter | None,
    skip_dominated: bool = True,
    gates_at_end: bool = False,
) -> StudyOutcome:
    assert plan.store is not None
    stored = plan.store.study_space(plan.study)
    if stored is not None:  # again under the lock: another process may have created it meanwhile
        check_same_experiment(plan.study, stored, plan.space)
    host_key = plan.store.save_host(plan.host)
    plan.store.save_study(
        plan.study, plan.space, plan.hardware.name, plan.nodes, host_key, space_fingerprint(plan.space),
        accuracy=plan.ctx.accuracy,
    )
    if qeval_reference is not None:
        plan.store.set_study_reference(plan.study, qeval_reference)
    budget = TimeBudget(time_budget_s)
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
        skip_dominated=skip_dominated,
        gates_at_end=gates_at_end,
    )
    result = tuner.run()
    events = reporter.trial_event if reporter else (lambda _: None)
    result = _confirm(plan, result, host_key, confirm_rounds, budget, events)
    # after the confirmation: its rounds relaunched the baseline, and those launches count
    if relaunch_baseline_for_noise(plan, result, host_key, noise_relaunches, budget, events):
        result = outcome_of(plan.store, plan.study, result.exhausted, result.stopped)
    return result


def _confirm(
    plan: SearchPlan, result: StudyOutcome, host_key: str, confirm_rounds: int, budget: TimeBudget,
    events: Callable[[str], None],
) -> StudyOutcome:
    """The best trial against the baseline in interleaved relaunches (autotune/confirm.py): the rounds
    of this pair that earlier sittings ran count, and only the missing ones are run."""
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

    def keep(arm: TrialResult, round_: int, value: float | None, seconds: float) -> ConfirmationLaunch:
        sample = None
        if value is not None:
            sample = store.add_launch_sample(host_key, plan.space.engine, plan.study, arm.candidate, value, "confirm",
                                             arm.number, metric=plan.space.objective.metric)
        return store.add_confirmation_launch(ConfirmationLaunch(
            id=0, study=plan.study, best_trial=best.number, baseline_trial=base.number, round=round_, trial=arm.number,
            objective=value, duration_s=round(seconds, 3), sample_id=sample,
        ))

    # the verdict pools its own launches with the host's noise: the prior must not hold them again
    own = frozenset(x.sample_id for x in earlier if x.sample_id is not None)
    prior = store.launch_noise(host_key, plan.space.engine, plan.space.objective.metric, exclude=own)
    store.save_confirmation(confirm(plan.ctx, best, base, rounds, free_port, keep, events, prior, earlier,
                                    total=confirm_rounds, clock=budget.clock))
    cut = None
    if rounds < missing:
        cut = (f"confirmation: {rounds_done(earlier) + rounds} of {confirm_rounds} rounds so far, the time budget left "
               f"{missing - rounds} for a resume ({budget.refusal(round_s, 'a confirmation round')})")
    return outcome_of(store, plan.study, result.exhausted, result.stopped or cut)


def forecast(
    plan: SearchPlan, trials: int, confirm_rounds: int, gates_at_end: bool | None = None, noise_relaunches: int = 0,
) -> RunForecast:
    """What a run will do before its first launch: candidates left, trials, confirmation, time.
    A launch's time is priced without its gates, and the gates where they run: with gates at the
    end the qeval reference's trial and one relaunch of the final best, else every trial (at most)."""
    store = plan.store
    own = store.trials(plan.study) if store else []
    tried = {t.candidate.key() for t in own}
    left = [c for c in enumerate_candidates(plan.space) if plan.pruner.reason(c) is None and c.key() not in tried]
    measured = len([t for t in own if t.status != "skipped"])
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
    gates = plan.ctx.accuracy and (plan.space.gates.needle is not None or plan.space.gates.qeval is not None)
    gated = relaunches = 0
    gates_s: float | None = None
    if gates:
        gates_s = statistics.median(gate_runs) if gate_runs else (
            workload_guess_s(plan.space, True, guess.decode_tps, guess.prefill_tps) - plain
        )
        if plan.engine.gates_at_end if gates_at_end is None else gates_at_end:
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
    )


def pick_study(store: Store, name: str | None) -> str:
    studies = store.studies()
    if not studies:
        raise ConfigError(f"{store.path} holds no study yet: run `autotune search` first")
    if name is None:
        return studies[-1]["name"]
    if store.study(name) is None:
        known = ", ".join(s["name"] for s in studies)
        raise ConfigError(f"no study {name!r} in {store.path}; studies: {known}")
    return name


def outcome(store: Store, name: str) -> StudyOutcome:
    return outcome_of(store, name)


class OpenAttempt(BaseModel):
    """A launch runs.db shows in flight: running now, or cut (its process is gone without a result)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    number: int
    host: str
    pid: int
    started_at: str
    running: bool

    def describe(self) -> str:
        if self.running:
            return f"trial {self.number}: running now (PID {self.pid} on {self.host}, since {self.started_at})"
        return (
            f"trial {self.number}: crashed: autotune (PID {self.pid} on {self.host}) ended during this trial "
            f"(started {self.started_at}) without a result; the next `autotune search` of this study records "
            "it and re-runs it once"
        )


def open_attempts(store: Store, name: str) -> list[OpenAttempt]:
    from autotune.study_lock import pid_alive

    out = []
    for row in store.open_attempts(name):
        running = row["host"] != socket.gethostname() or pid_alive(row["pid"])
        out.append(OpenAttempt(number=row["number"], host=row["host"], pid=row["pid"], started_at=row["started_at"], running=running))
    return out


class Export(BaseModel):
    """An exported recipe: its YAML, and what the user must be told about its verdict."""

    model_config = ConfigDict(extra="forbid")

    text: str
    warnings: list[str] = []


def recipe_verdict(space: SearchSpace, outcome: StudyOutcome, chosen: TrialResult) -> RecipeVerdict:
    """Whether the exported trial is a confirmed winner, and on what evidence."""
    accuracy = accuracy_status(chosen) if outcome.accuracy else "unchecked"
    if dummy_weights(space):
        accuracy = "not applicable"
    base = outcome.baseline
    confirmation = outcome.confirmation if outcome.confirmation and outcome.confirmation.best_trial == chosen.number else None
    if base is not None and chosen.candidate.key() == base.candidate.key():
        status, summary = "baseline", "the baseline (engine defaults) is the best config measured"
    elif confirmation is not None:
        status, summary = confirmation.status, confirmation.verdict
    else:
        status = "not confirmed"
        summary = "not confirmed: no confirmation rounds ran for this trial (autotune search --confirm-rounds 2 or more)"
    return RecipeVerdict(
        status=status,
        summary=summary,
        accuracy=accuracy,
        launch_noise=outcome.noise.describe() if outcome.noise else "unknown: no config was launched twice on this host",
        objective=space.objective.label,
        confirmation=confirmation,
        tradeoffs=outcome.tradeoffs_of(chosen),
        accuracy_failures=outcome.failed_classes(),
    )


def export_warnings(verdict: RecipeVerdict) -> list[str]:
    out = []
    if verdict.status in ("no winner", "not confirmed"):
        out.append(f"this recipe is not a confirmed winner ({verdict.status}): {verdict.summary}")
    if verdict.accuracy not in ("pass", "not applicable"):
        out.append(f"accuracy {verdict.accuracy}: the recipe's gates did not all pass with evidence")
    if verdict.tradeoffs:
        out.append("it trades away, against the baseline beyond the launch noise: "
                   + "; ".join(t.describe() for t in verdict.tradeoffs))
    return out


def export_recipe(store: Store, study: str | None, trial_number: int | None, output: Path | None) -> Export:
    name = pick_study(store, study)
    row = store.study(name)
    assert row is not None
    space = SearchSpace.model_validate_json(row["space"])
    result = outcome_of(store, name)
    if trial_number is None:
        chosen: TrialResult | None = result.best
        if chosen is None:
            raise ConfigError(f"study {name!r} has no trial that ran and passed its gates; nothing to export")
    else:
        chosen = next((t for t in result.trials if t.number == trial_number), None)
        if chosen is None:
            raise ConfigError(f"study {name!r} has no trial {trial_number}")
        if chosen.status != "ok":
            raise ConfigError(f"trial {trial_number} did not run ({chosen.status}: {chosen.reason}); nothing to export")
    verdict = recipe_verdict(space, result, chosen)
    recipe = recipe_from_trial(
        space, chosen, result.baseline, row["hardware"], row["nodes"], str(store.path), verdict=verdict,
        accuracy_on=result.accuracy,
    )
    text = render_recipe(recipe, output)
    store.save_recipe(name, chosen.number, recipe.kind, text)
    return Export(text=text, warnings=export_warnings(verdict))


def predicted_recipe(
    space_name: str,
    hardware: str | None,
    nodes: int | None,
    model_path: str | None,
    output: Path | None,
    db_path: Path | None = None,
) -> str:
    """The best-predicted candidate of a space as a recipe marked `predicted`: nothing measured."""
    space, engine, profile, node_count, kept, _ = _planned(space_name, hardware, nodes, model_path, db_path)
    report = plan_candidates(space, kept, profile, node_count)
    if not report.kept:
        raise NoValidCandidate(f"space {space.name!r}: no candidate fits {profile.name} x{node_count}")
    best = report.kept[0]
    candidate = next(c for c in kept if c.key() == best.candidate_key)
    launch, _ = launch_to_show(space, engine, candidate, profile, node_count, None)
    recipe = recipe_from_plan(space, candidate, best, launch, profile.name, node_count)
    text = render_recipe(recipe, output)
    return text


def launch_to_show(
    space: SearchSpace,
    engine: Engine,
    candidate: Candidate,
    profile: HardwareProfile,
    nodes: int,
    cluster_file: Path | None,
) -> tuple[LaunchSpec, str | None]:
    """`candidate`'s launch for a person to read or run: on the boxes of the cluster file, else (several
    nodes) on placeholder boxes, with the note that says so. Nothing is started."""
    note = None
    if cluster_file is not None:
        cluster: Cluster | None = first_nodes(load_cluster(cluster_file), nodes, cluster_file)
    elif nodes > 1:
        cluster, note = placeholder_cluster(nodes, profile.gpus_per_node), placeholder_note(nodes)
    else:
        cluster = None
    model = space.model
    if not model.path:  # a PyPI model package: its file is only assembled when a search runs
        model = model.model_copy(update={"path": f"<the model file of {model.package}>"})
    ctx = TrialContext(study="plan", space=space, model=model, engine=engine, logs_dir=Path("."), cluster=cluster)
    return portable_launch(ctx.render(candidate)), note


def plan_space(
    space_name: str,
    hardware: str | None,
    nodes: int | None,
    model_path: str | None,
    db_path: Path | None = None,
    cluster_file: Path | None = None,
) -> PlanReport:
    """Memory fit and predictions per candidate, plus the best-predicted one's launch per node."""
    space, engine, profile, node_count, kept, probe_dropped = _planned(
        space_name, hardware, nodes, model_path, db_path, cluster_file
    )
    report = plan_candidates(space, kept, profile, node_count)
    launch = note = None
    if report.kept:
        best = next(c for c in kept if c.key() == report.kept[0].candidate_key)
        launch, note = launch_to_show(space, engine, best, profile, node_count, cluster_file)
    return report.model_copy(
        update={"dropped": [*probe_dropped, *report.dropped], "launch": launch, "hosts_note": note}
    )


def _planned(
    space_name: str, hardware: str | None, nodes: int | None, model_path: str | None, db_path: Path | None,
    cluster_file: Path | None = None,
) -> tuple[SearchSpace, Engine, HardwareProfile, int, list[Candidate], list[PlanEstimate]]:
    """The space's candidates that rules, layout and -- when runs.db holds probes of this very host
    and the plan is for this host's hardware -- the probes allow; the probe-refused ones apart."""
    space = load_space(space_name)
    engine = get_engine(space.engine).use_space(space)
    if model_path:
        space = space.model_copy(update={"model": resolve_model(space.model, model_path)})
    store = Store(db_path, must_exist=True) if db_path is not None and db_path.exists() else None
    device = detect() if store is not None or (hardware or space.hardware) == "auto" else None
    profile = node_profile(hardware or space.hardware, device, cluster_file)
    node_count = nodes or space.nodes
    space, _, _, kept = launchable(space, engine, profile, node_count)
    dropped: list[PlanEstimate] = []
    if store is not None and device is not None and is_this_host(profile, device):
        check = probes_check(store.probe_results(host_fingerprint(device, engine).key()))
        verdicts = [(c, check(c)) for c in kept]
        kept = [c for c, why in verdicts if why is None]
        dropped = [dropped_estimate(c, why) for c, why in verdicts if why is not None]
    return space, engine, profile, node_count, kept, dropped
