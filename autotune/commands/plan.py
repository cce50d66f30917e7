"""`autotune plan` and `export --predicted`: memory fit and roofline predictions per candidate, and the
best-predicted candidate's exact launch per node; launches nothing."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from autotune.commands.setup import Placement, on_this_host, place, read_space
from autotune.engines import Engine
from autotune.errors import NoValidCandidate
from autotune.hardware.profiles import is_this_host
from autotune.launchers.cluster import first_nodes, load_cluster, placeholder_cluster, placeholder_note
from autotune.checkpoint.files import resolve_model
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
from autotune.space.candidates import Pruner, known_failures_check, probes_check
from autotune.store import Store
from autotune.trial.context import TrialContext


class Planned(BaseModel):
    """A space placed for planning (commands/setup.py's pipeline): the candidates that may launch
    (`placed.kept` less what this host's probes and the profile's known failures rule out), the
    ones ruled out with why, and the knob values against the installed engine's choices."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    placed: Placement
    engine: Engine
    kept: list[Candidate]
    dropped: list[PlanEstimate]
    choices: ChoicesCheck


def predicted_recipe(
    space_name: str,
    hardware: str | None,
    nodes: int | None,
    model_path: str | None,
    output: Path | None,
    db_path: Path | None = None,
) -> str:
    """The best-predicted candidate of a space as a recipe marked `predicted`: nothing measured."""
    made = planned(space_name, hardware, nodes, model_path, db_path)
    space, profile, node_count = made.placed.space, made.placed.profile, made.placed.nodes
    report = plan_candidates(space, made.kept, profile, node_count)
    if not report.kept:
        raise NoValidCandidate(f"space {space.name!r}: no candidate fits {profile.name} x{node_count}")
    best = report.kept[0]
    candidate = next(c for c in made.kept if c.key() == best.candidate_key)
    launch, _ = launch_to_show(space, made.engine, candidate, profile, node_count, None)
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
    made = planned(space_name, hardware, nodes, model_path, db_path, cluster_file)
    space, profile, node_count = made.placed.space, made.placed.profile, made.placed.nodes
    report = plan_candidates(space, made.kept, profile, node_count)
    launch = note = None
    if report.kept:
        best = next(c for c in made.kept if c.key() == report.kept[0].candidate_key)
        launch, note = launch_to_show(space, made.engine, best, profile, node_count, cluster_file)
    return report.model_copy(
        update={"dropped": [*made.dropped, *report.dropped], "launch": launch, "hosts_note": note,
                "choices": made.choices}
    )


def planned(
    space_name: str, hardware: str | None, nodes: int | None, model_path: str | None, db_path: Path | None,
    cluster_file: Path | None = None,
) -> Planned:
    """The space's candidates that rules, layout, the profile's known failures (hardware not this
    host's) and -- when runs.db holds probes of this very host and the plan is for this host's
    hardware -- the probes allow; the refused ones apart; and the knob values against the
    installed engine's choices (a refused value: ConfigError)."""
    space, engine = read_space(space_name)
    if model_path:
        space = space.model_copy(update={"model": resolve_model(space.model, model_path)})
    store = Store(db_path, must_exist=True) if db_path is not None and db_path.exists() else None
    here = on_this_host(space, engine)  # `auto`, or a named profile this host is, takes the host's GPUs and memory
    assert here.choices is not None
    placed = place(here.kept(space), engine, here.device, hardware, nodes, cluster_file)
    checks = [known_failures_check(placed.profile)]  # a no-op on this host's own profile: its probes decide
    if store is not None and is_this_host(placed.profile, here.device):
        checks.append(probes_check(store.probe_results(here.host.key())))
    pruner = Pruner(checks)
    verdicts = [(c, pruner.reason(c)) for c in placed.kept]
    return Planned(placed=placed, engine=engine, kept=[c for c, why in verdicts if why is None],
                   dropped=[dropped_estimate(c, why) for c, why in verdicts if why is not None], choices=here.choices)
