"""`autotune plan` and `export --predicted`: memory fit and roofline predictions per candidate, and the
best-predicted candidate's exact launch per node; launches nothing."""

from __future__ import annotations

from pathlib import Path

from autotune.commands.setup import launchable, node_profile
from autotune.engines import Engine, get_engine
from autotune.errors import NoValidCandidate
from autotune.hardware.device import detect, host_fingerprint
from autotune.hardware.profiles import is_this_host
from autotune.launchers.cluster import first_nodes, load_cluster, placeholder_cluster, placeholder_note
from autotune.model.files import resolve_model
from autotune.models import (
    Candidate,
    ChoicesCheck,
    Cluster,
    HardwareProfile,
    LaunchSpec,
    PlanEstimate,
    SearchSpace,
)
from autotune.output.recipe import portable_launch, recipe_from_plan, render_recipe
from autotune.planner.roofline import PlanReport, dropped_estimate
from autotune.planner.roofline import plan as plan_candidates
from autotune.space.candidates import Pruner, known_failures_check, load_space, probes_check
from autotune.store import Store
from autotune.trial.context import TrialContext


def predicted_recipe(
    space_name: str,
    hardware: str | None,
    nodes: int | None,
    model_path: str | None,
    output: Path | None,
    db_path: Path | None = None,
) -> str:
    """The best-predicted candidate of a space as a recipe marked `predicted`: nothing measured."""
    space, engine, profile, node_count, kept, _, _ = _planned(space_name, hardware, nodes, model_path, db_path)
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
    space, engine, profile, node_count, kept, refused, choices = _planned(
        space_name, hardware, nodes, model_path, db_path, cluster_file
    )
    report = plan_candidates(space, kept, profile, node_count)
    launch = note = None
    if report.kept:
        best = next(c for c in kept if c.key() == report.kept[0].candidate_key)
        launch, note = launch_to_show(space, engine, best, profile, node_count, cluster_file)
    return report.model_copy(
        update={"dropped": [*refused, *report.dropped], "launch": launch, "hosts_note": note, "choices": choices}
    )


def _planned(
    space_name: str, hardware: str | None, nodes: int | None, model_path: str | None, db_path: Path | None,
    cluster_file: Path | None = None,
) -> tuple[SearchSpace, Engine, HardwareProfile, int, list[Candidate], list[PlanEstimate], ChoicesCheck]:
    """The space's candidates that rules, layout, the profile's known failures (hardware not this
    host's) and -- when runs.db holds probes of this very host and the plan is for this host's
    hardware -- the probes allow; the refused ones apart; and
    the knob values against the installed engine's choices (a refused value: ConfigError)."""
    space = load_space(space_name)
    engine = get_engine(space.engine).use_space(space)
    if model_path:
        space = space.model_copy(update={"model": resolve_model(space.model, model_path)})
    store = Store(db_path, must_exist=True) if db_path is not None and db_path.exists() else None
    device = detect()  # `auto`, or a named profile this host is, takes the host's GPUs and memory
    choices = engine.check_values(space, host_fingerprint(device, engine).key())
    space = choices.kept(space)
    profile = node_profile(hardware or space.hardware, device, cluster_file)
    node_count = nodes or space.nodes
    space, _, _, kept = launchable(space, engine, profile, node_count)
    checks = [known_failures_check(profile)]  # a no-op on this host's own profile: its probes decide
    if store is not None and device is not None and is_this_host(profile, device):
        checks.append(probes_check(store.probe_results(host_fingerprint(device, engine).key())))
    pruner = Pruner(checks)
    verdicts = [(c, pruner.reason(c)) for c in kept]
    kept = [c for c, why in verdicts if why is None]
    dropped = [dropped_estimate(c, why) for c, why in verdicts if why is not None]
    return space, engine, profile, node_count, kept, dropped, choices
