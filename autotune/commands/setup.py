"""The set-up every command that launches shares: a space, engine, model, hardware and cluster
checked into a SearchPlan before anything runs.

`prepare` checks everything that can be wrong with the input before runs.db is opened, so a bad
space, engine, model path or hardware choice leaves the database untouched: knob values against
the engine's own options and the choices it accepts (read from the installed engine, cached per
host fingerprint), the launcher against the cluster file, the launcher's libraries, the
cluster's daemons; then, reading runs.db only, that a resumed study keeps the space it was made
from."""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from autotune.engines import Engine, get_engine
from autotune.errors import ConfigError, EnergyUnavailable, ModelNotFound, NoValidCandidate
from autotune.hardware.device import detect, host_fingerprint
from autotune.hardware.profiles import GIB_IN_GB, parallel_layout, resolve_hardware
from autotune.engines.base import Knobs
from autotune.launchers import launcher_class, nccl
from autotune.study.leases import check_parallel, parallel_default
from autotune.launchers.cluster import first_nodes, load_cluster, local_cluster, placeholder_cluster
from autotune.launchers.preflight import check_launch
from autotune.launchers.watchdog import limits_for
from autotune.model.files import resolve_model
from autotune.models import (
    Candidate,
    Cluster,
    DeviceIdentity,
    GatePolicy,
    HardwareProfile,
    NcclReading,
    SearchSpace,
)
from autotune.planner.roofline import estimate, fits_check, kv_pool_of
from autotune.space.candidates import (
    Check,
    Pruner,
    baseline,
    count_candidates,
    enumerate_candidates,
    known_failures_check,
    load_space,
    make_candidate,
    needle_check,
    probes_check,
    rules_check,
)
from autotune.space.fingerprint import check_same_experiment
from autotune.store import Store, check_writable
from autotune.study.plan import QueuedAs, SearchPlan, queued_first, surviving
from autotune.trial.context import TrialContext


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


def launch_check(ctx: TrialContext) -> Check:
    """A candidate whose launch the launcher cannot run is skipped with the reason, not launched."""
    def check(candidate: Candidate) -> str | None:
        try:
            ctx.check_launchable(candidate)
        except ConfigError as exc:
            return f"launch: {exc}"
        return None

    return check


def checked_nccl(ctx: TrialContext, engine: Engine, base: Candidate, kept: list[Candidate]) -> list[NcclReading]:
    """Read the NCCL every node will load (before runs.db opens) and refuse what is known to fail
    across Sparks: a bad pip/system pair, mixed versions, or CUDA graphs on an old NCCL for every
    candidate (a study where some candidates run eager keeps those; `nccl_check` skips the rest)."""
    readings = launcher_class(ctx.launcher).read_nccl(ctx.render(base), ctx.cluster)
    refusal = nccl.launch_refusal(readings)
    if refusal:
        raise ConfigError(f"NCCL: {refusal}")
    check = nccl_check(engine, readings)
    if kept and all(check(c) for c in kept):
        raise ConfigError(f"NCCL: every candidate uses CUDA graphs: {nccl.graphs_refusal(readings)}")
    return readings


def nccl_check(engine: Engine, readings: list[NcclReading]) -> Check:
    """Skip a candidate that replays CUDA graphs across nodes on an NCCL that deadlocks there."""
    refusal = nccl.graphs_refusal(readings)

    def check(candidate: Candidate) -> str | None:
        if refusal and engine.cuda_graphs(Knobs(candidate.params)):
            return f"nccl: {refusal}"
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
    if nodes == 1 and chosen.ray_nodes_only:
        # a one-node Ray cluster on this host: its GPUs (none on a CPU host), TP 1 unless asked
        gpus = min(hardware.gpus_per_node, len(device.gpus))
        temp_root = Path(tempfile.gettempdir()) / f"at-ray-{os.getpid()}"
        return local_cluster(1, temp_root, gpus_per_node=gpus)
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


def gpu_energy_absent(space: SearchSpace) -> str | None:
    """Why this host cannot give the GPU energy the space's objective reads; None where it can, or
    where the objective reads none."""
    if not space.objective.gpu_energy:
        return None
    from autotune.bench.energy import EnergyMeter

    meter = EnergyMeter.open(os.environ.get("CUDA_VISIBLE_DEVICES"))
    try:
        return meter.absent if meter.method is None else None
    finally:
        meter.close()


def check_energy_readable(space: SearchSpace) -> None:
    """An objective of GPU energy needs an energy counter or power readings on this host: refused
    (exit 3) before runs.db opens, not a study whose every trial fails."""
    absent = gpu_energy_absent(space)
    if absent is not None:
        raise EnergyUnavailable(f"objective {space.objective.metric} needs the GPU's energy, and this host has "
                                f"none to read ({absent}); rank by tok/s here (objective.metric "
                                f"{space.objective.speed_fallback}), energy is then recorded where readable")
def box_pool(cluster_file: Path | None, boxes: int | None) -> Cluster | None:
    """The boxes trials lease (autotune/study/leases.py): every node of the cluster file (None:
    `--boxes N` stand-ins on this host, or one box). `--boxes` with a cluster file is refused."""
    if cluster_file is None:
        return None
    if boxes is not None:
        raise ConfigError("--boxes stands in boxes on this host; with --cluster FILE the file's nodes are the boxes")
    return load_cluster(cluster_file)


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
    boxes: int | None = None,
    parallel: int | None = None,
    every_trial: bool = False,
    gates_at_end: bool | None = None,
) -> SearchPlan:
    """`accuracy`, `every_trial` and `gates_at_end` (None: the engine's default) become the plan's
    one GatePolicy, in `plan.ctx.gates`."""
    space = load_space(space_name)
    engine = get_engine(space.engine).use_space(space)
    first = parse_tries(space, tries or [])  # a --try takes values of the space: checked with it
    if not dry_run:
        engine.check_available()
        check_energy_readable(space)
    try:
        model = resolve_model(space.model, model_path)
    except ModelNotFound:
        if not dry_run:
            raise
        model = space.model.model_copy(update={"path": model_path or space.model.path or space.model.name})
    device = detect()
    host = host_fingerprint(device, engine)
    choices = engine.check_values(space, host.key())  # a value this engine version refuses: exit 2 here
    if choices.left_out:  # what this version does not list leaves the study before it is fingerprinted
        space = choices.kept(space)
        first = parse_tries(space, tries or [])
    if not dry_run:
        engine.preflight(space)  # the options the kept space renders, against the installed engine's help
    profile = node_profile(hardware or space.hardware, device, cluster_file)
    node_count = nodes or space.nodes
    space, rules, layout, kept = launchable(space.model_copy(update={"model": model}), engine, profile, node_count)
    launcher_name = launcher or space.launcher
    cluster = cluster_for(cluster_file, node_count, launcher_name, profile, device, space.image, dry_run)
    check_launch(launcher_name, cluster, cluster_file=cluster_file, reach=not dry_run)
    name = study or f"{space.name}-{profile.name}-x{node_count}"
    gates = GatePolicy.of(accuracy, every_trial, engine.gates_at_end if gates_at_end is None else gates_at_end)
    ctx = TrialContext(
        study=name,
        space=space,
        model=model,
        engine=engine,
        logs_dir=logs_dir,
        gates=gates,
        launcher=launcher_name,
        cluster=cluster,
        watchdog=limits_for(profile, device.memory_total_gb * GIB_IN_GB),
        kv_pool=kv_pool_of(space, profile, node_count) if space.objective.capacity else None,
    )
    ctx.check_launchable(baseline(space))  # a launch the launcher cannot run: refused here, not a crash
    if node_count > 1 and not dry_run:
        ctx = ctx.model_copy(update={"nccl": checked_nccl(ctx, engine, baseline(space), kept)})
    if dry_run:
        store = Store(db_path) if db_path.exists() else None
    else:
        check_writable(db_path)
        store = Store(db_path)
    stored = store.study_space(name) if store else None
    if stored is not None:
        check_same_experiment(name, stored, space)
    probes = store.probe_results(host.key()) if store else []
    pruner = Pruner(
        [rules, layout, needle_check(space, gates.accuracy), probes_check(probes), known_failures_check(profile),
         fits_check(space, profile, node_count),
         launch_check(ctx), nccl_check(engine, ctx.nccl)]
    )
    pool = box_pool(cluster_file, boxes)
    # without a cluster file or --boxes: the boxes of one launch, one trial at a time as always
    pool_size = len(pool.nodes) if pool is not None else (boxes or node_count)
    in_flight = parallel or parallel_default(pool_size, node_count)
    check_parallel(in_flight, pool_size, node_count)
    return SearchPlan(
        space=space,
        engine=engine,
        hardware=profile,
        nodes=node_count,
        boxes=pool_size,
        pool_cluster=pool,
        parallel=in_flight,
        study=name,
        host=host,
        db_path=db_path,
        store=store,
        pruner=pruner,
        ctx=ctx,
        candidates_total=count_candidates(space),
        candidates_after_rules=len(kept),
        first=first,
        choices=choices,
    )


#: predictions closer than this (relative) are ties: below what the roofline planner can tell apart
PLANNER_TIE = 0.05


def planner_order(space: SearchSpace, hardware: HardwareProfile, nodes: int) -> Callable[[list[Candidate]], list[Candidate]]:
    """The planner's prior for the first trials: candidates by predicted decode tok/s (an
    output_tps_cN objective: predicted output tok/s at N streams), best first.
    Predictions within PLANNER_TIE of each other are ties (bands of that width down from the best),
    and among ties the candidate that changes fewer knobs from the baseline comes first: the
    planner's gain is the same, and each extra untested change is one more way to fail."""
    base = baseline(space)
    objective = space.objective
    level = objective.concurrency if not objective.gpu_energy else None

    def predicted(candidate: Candidate) -> float:
        est = estimate(space, candidate, hardware, nodes)
        return (est.output_tps_at(level) if level else est.decode_tps) or 0.0

    def changes(candidate: Candidate) -> int:
        return sum(1 for k in space.knobs if candidate.params.get(k.name, candidate.env.get(k.name))
                   != base.params.get(k.name, base.env.get(k.name)))

    def order(candidates: list[Candidate]) -> list[Candidate]:
        scored = [(predicted(c), c) for c in candidates]
        top = max((tps for tps, _ in scored), default=0.0)

        def band(tps: float) -> int:
            return int(math.log(top / tps) / math.log(1 + PLANNER_TIE)) if tps > 0 and top > 0 else 10**6

        return [c for _, c in sorted(scored, key=lambda x: (band(x[0]), changes(x[1])))]

    return order


def predicted_order(plan: SearchPlan) -> Callable[[list[Candidate]], list[Candidate]]:
    return planner_order(plan.space, plan.hardware, plan.nodes)


def dry_run_rows(plan: SearchPlan) -> tuple[list[tuple[Candidate, str | None]], list[tuple[Candidate, QueuedAs]]]:
    """Every candidate with its pruning reason (None: it may launch), and what a new study of this
    plan launches before its sampler picks, as the Tuner queues it."""
    rows = surviving(plan)
    kept = [c for c, why in rows if why is None]
    return rows, queued_first(baseline(plan.space), plan.first, predicted_order(plan)(kept))


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
