"""The set-up every command that reads a space shares: one pipeline of checks before anything runs.

1. `read_space`: the space file, validated for its engine.
2. `on_this_host`: this host's device and fingerprint (what probe results and learned failures are
   valid for), and the knob values the installed engine accepts (read from the engine, cached per
   host fingerprint); what this version does not list leaves the space (`HostView.kept`).
3. `place`: the hardware of one node (a cluster file's node count per box wins) and the number of
   nodes, the space as it runs there (autotune/space/layout.py), and the candidates its rules and
   the layout allow.

`prepare` (search) goes on before runs.db is opened, so that a bad space, engine, model path or
hardware choice leaves the database untouched: the launcher against the cluster file, its
libraries and the cluster's daemons, the trial context, the NCCL every node loads; then, reading
runs.db only, that a resumed study keeps the space it was made from; the pruner and the box pool:
a PreparedStudy. `plan` (commands/plan.py) prunes what the profile's known failures and this host's
probes rule out; `probe` (commands/probe.py) reads the space and this host.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from autotune.bench.energy import check_energy_readable
from autotune.bench.occupancy import gpu_holders
from autotune.engines import Engine, get_engine
from autotune.engines.base import Knobs
from autotune.errors import ConfigError, ModelNotFound
from autotune.hardware.device import detect, host_fingerprint
from autotune.hardware.profiles import GIB_IN_GB, resolve_hardware
from autotune.launchers import launcher_class, nccl
from autotune.launchers.cluster import first_nodes, load_cluster, local_cluster, placeholder_cluster
from autotune.launchers.preflight import check_launch
from autotune.launchers.watchdog import limits_for
from autotune.checkpoint.files import resolve_model
from autotune.models import (
    Candidate,
    ChoicesCheck,
    Cluster,
    DeviceIdentity,
    GatePolicy,
    GpuHolder,
    HardwareProfile,
    HostFingerprint,
    ModelSpec,
    NcclReading,
    SearchSpace,
)
from autotune.planner.prior import planner_order
from autotune.planner.roofline import fits_check, kv_pool_of
from autotune.space.candidates import (
    Check,
    Pruner,
    baseline,
    count_candidates,
    known_failures_check,
    load_space,
    needle_check,
    parse_tries,
    probes_check,
)
from autotune.space.fingerprint import check_same_experiment
from autotune.space.layout import launchable
from autotune.store import Store, check_writable
from autotune.study.leases import check_parallel, parallel_default
from autotune.study.prepared import QueuedAs, PreparedStudy, queued_first, surviving
from autotune.trial.context import TrialContext


def read_space(space_name: str) -> tuple[SearchSpace, Engine]:
    """The space named (a shipped one, or a file) and its engine, the space validated for it."""
    space = load_space(space_name)
    return space, get_engine(space.engine).use_space(space)


class HostView(BaseModel):
    """What this host says about a space: its device, its fingerprint, and the knob values its
    installed engine accepts (None where they were not asked)."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    device: DeviceIdentity
    host: HostFingerprint
    choices: ChoicesCheck | None = None

    def kept(self, space: SearchSpace) -> SearchSpace:
        """`space` without the values this engine version does not list."""
        return self.choices.kept(space) if self.choices is not None else space


def on_this_host(space: SearchSpace, engine: Engine, *, values: bool = True) -> HostView:
    """This host's device and fingerprint, and (`values`) the space's knob values held against the
    installed engine's choices: a value it refuses is a ConfigError (exit 2) here."""
    device = detect()
    host = host_fingerprint(device, engine)
    return HostView(device=device, host=host, choices=engine.check_values(space, host.key()) if values else None)


class Placement(BaseModel):
    """A space placed on `nodes` nodes of `profile`: the space as it runs there, its rule and
    layout checks, and the candidates both allow (`kept`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    space: SearchSpace
    profile: HardwareProfile
    nodes: int
    rules: Check
    layout: Check
    kept: list[Candidate]


def place(space: SearchSpace, engine: Engine, device: DeviceIdentity, hardware: str | None, nodes: int | None,
          cluster_file: Path | None = None) -> Placement:
    """`space` on `nodes` nodes of `hardware` (None: the space's own); a clear error where no
    candidate is left (autotune/space/layout.py)."""
    profile = node_profile(hardware or space.hardware, device, cluster_file)
    count = nodes or space.nodes
    space, rules, layout, kept = launchable(space, engine, profile, count)
    return Placement(space=space, profile=profile, nodes=count, rules=rules, layout=layout, kept=kept)


def model_of(space: SearchSpace, model_path: str | None, dry_run: bool = False) -> ModelSpec:
    """The model files to serve (`model_path`, else the space's); a dry run, which serves nothing,
    names them even where they are not on this host."""
    try:
        return resolve_model(space.model, model_path)
    except ModelNotFound:
        if not dry_run:
            raise
        return space.model.model_copy(update={"path": model_path or space.model.path or space.model.name})


def open_store(db_path: Path, must_exist: bool = False) -> Store:
    return Store(db_path, must_exist=must_exist)


def node_profile(name: str, device: DeviceIdentity | None, cluster_file: Path | None) -> HardwareProfile:
    """The hardware of one node. With a cluster file a node is what the file calls one: its
    gpus_per_node wins over the profile's (two raylets of one GPU each on a two-GPU host)."""
    profile = resolve_hardware(name, device)
    if cluster_file is None:
        return profile
    return profile.model_copy(update={"gpus_per_node": load_cluster(cluster_file).gpus_per_node})


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
) -> PreparedStudy:
    """`accuracy`, `every_trial` and `gates_at_end` (None: the engine's default) become the plan's
    one GatePolicy, in `plan.ctx.gates`."""
    space, engine = read_space(space_name)
    first = parse_tries(space, tries or [])  # a --try takes values of the space: checked with it
    if not dry_run:
        engine.check_available()
        check_energy_readable(space)
    model = model_of(space, model_path, dry_run)
    here = on_this_host(space, engine)  # a value this engine version refuses: exit 2 here
    if here.choices and here.choices.left_out:  # what this version does not list leaves before the fingerprint
        space = here.kept(space)
        first = parse_tries(space, tries or [])
    if not dry_run:
        engine.preflight(space)  # the options the kept space renders, against the installed engine's help
    placed = place(space.model_copy(update={"model": model}), engine, here.device, hardware, nodes, cluster_file)
    space, profile, node_count, kept = placed.space, placed.profile, placed.nodes, placed.kept
    launcher_name = launcher or space.launcher
    cluster = cluster_for(cluster_file, node_count, launcher_name, profile, here.device, space.image, dry_run)
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
        watchdog=limits_for(profile, here.device.memory_total_gb * GIB_IN_GB),
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
    probes = store.probe_results(here.host.key()) if store else []
    pruner = Pruner(
        [placed.rules, placed.layout, needle_check(space, gates.accuracy), probes_check(probes),
         known_failures_check(profile), fits_check(space, profile, node_count), ctx.launch_check(),
         nccl_check(engine, ctx.nccl)]
    )
    pool = box_pool(cluster_file, boxes)
    # without a cluster file or --boxes: the boxes of one launch, one trial at a time as always
    pool_size = len(pool.nodes) if pool is not None else (boxes or node_count)
    in_flight = parallel or parallel_default(pool_size, node_count)
    check_parallel(in_flight, pool_size, node_count)
    return PreparedStudy(
        space=space,
        engine=engine,
        hardware=profile,
        nodes=node_count,
        boxes=pool_size,
        pool_cluster=pool,
        parallel=in_flight,
        study=name,
        host=here.host,
        db_path=db_path,
        store=store,
        pruner=pruner,
        ctx=ctx,
        candidates_total=count_candidates(space),
        candidates_after_rules=len(kept),
        first=first,
        choices=here.choices,
    )


def others_on_gpus(engine: Engine, cluster_file: Path | None = None) -> list[GpuHolder]:
    """The processes that hold the GPUs of this host `engine` will use, read just before the first
    launch of a study or a probe (autotune/bench/occupancy.py); none for an engine that needs no GPU,
    or boxes of a cluster file (their GPUs are not this host's)."""
    if cluster_file is not None or not engine.needs_gpu:
        return []
    return gpu_holders(os.environ.get("CUDA_VISIBLE_DEVICES"))


def dry_run_rows(plan: PreparedStudy) -> tuple[list[tuple[Candidate, str | None]], list[tuple[Candidate, QueuedAs]]]:
    """Every candidate with its pruning reason (None: it may launch), and what a new study of this
    plan launches before its sampler picks, as the Tuner queues it."""
    rows = surviving(plan)
    kept = [c for c, why in rows if why is None]
    order = planner_order(plan.space, plan.hardware, plan.nodes)
    return rows, queued_first(baseline(plan.space), plan.first, order(kept))
